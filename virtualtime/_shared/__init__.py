"""What every part shares: ``_time`` (ticks, exact time arithmetic), ``_units``
(durations for people) and ``_errors`` (the error family).  It imports no other part.
"""
