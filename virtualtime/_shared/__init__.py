"""What every part shares: ``_time`` (ticks, exact time arithmetic), ``_units``
(durations for people), ``_errors`` (the error family) and ``_threads`` (the process's other
threads, as the asyncio loop's and trio's models of outside work see them).  It imports no
other part.
"""
