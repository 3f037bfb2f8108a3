# Types of the optional compiled helper (virtualtime/_cdate.c).
from collections.abc import Callable
from typing import Any

def set_targets(
    now: Callable[..., Any], utcnow: Callable[..., Any], today: Callable[..., Any], /
) -> None: ...
def addresses() -> dict[str, int]: ...
