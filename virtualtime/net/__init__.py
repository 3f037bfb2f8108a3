"""Deterministic simulation testing: simulated hosts, a network, faults and seeded runs.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

__all__: tuple[str, ...] = ()
