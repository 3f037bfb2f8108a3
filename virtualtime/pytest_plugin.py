"""pytest plugin for virtualtime (inert unless asked)."""

from __future__ import annotations
