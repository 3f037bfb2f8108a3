"""The clocks outside the loop: ``time.monotonic()``, ``time.time()``, ``datetime.now()``.

``_patch`` decides what those clocks read, for whom (``patch_time=True``); ``_hook``
redirects the C clock objects in place; ``_cclocks`` is the optional compiled helper.
Serves the asyncio engine and trio alike and imports neither (only ``_shared``).

Part of ``clocks``: may import ``shared`` (see tests/layout.py).
"""
