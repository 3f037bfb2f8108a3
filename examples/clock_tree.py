"""Covers: virtualtime.sim.Clock - a clock tree at relative rates, a pause and a tempo change.

Scenario: a band keeps time in beats on a clock running at 2 beats per second (120 bpm) under
the loop's clock; the hi-hat counts eighth notes on a child clock twice as fast as the band.
The lighting desk has a cue filed on the band's clock at beat 12.  At 2.125 s, a quarter into
a beat, the conductor pauses the band for 2 s, then resumes at 180 bpm: every musician still
waiting finishes what was left of its beat at the new tempo, and the cue moves with the band.
"""

from __future__ import annotations

import anyio

import virtualtime
from virtualtime.sim import Clock


async def main() -> None:
    root = Clock()  # follows the virtual loop: its now is anyio.current_time()
    band = root.child(rate=2.0)  # beats
    hihat = band.child(rate=2.0)  # eighth notes

    def log(who: str, what: str) -> None:
        print(f"t={root.now:6.3f}s  beat={band.now:6.3f}  {who:<9} {what}")

    def cue() -> str:
        found = root.next()  # the offset is in the root's (loop) seconds
        return "never while paused" if found is None else f"{found[0]} in {found[1]:.3f}s"

    async def drummer() -> None:
        for beat in range(8):
            log("drums", "kick" if beat % 2 == 0 else "snare")
            await band.sleep(1)

    async def hi_hat() -> None:
        for eighth in range(1, 16):
            await hihat.sleep(1)
            if eighth % 2:  # print the off-beats only
                log("hi-hat", "tss")

    async def conductor() -> None:
        band.schedule("lights", 12)
        log("desk", f"next cue: {cue()}")
        await anyio.sleep(2.125)
        band.rate = 0.0
        log("conductor", f"pause   (next cue: {cue()})")
        await anyio.sleep(2)
        band.rate = 3.0
        log("conductor", f"resume at 180 bpm (next cue: {cue()})")

    async with anyio.create_task_group() as tg:
        tg.start_soon(conductor)
        tg.start_soon(drummer)
        tg.start_soon(hi_hat)
    log("band", f"done after {band.now:g} beats")


if __name__ == "__main__":
    virtualtime.run(main())
