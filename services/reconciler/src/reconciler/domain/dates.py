"""Business dates: a configured time zone and cut-off turn an instant into the date it is booked on.

A record is assigned its business date once, when the reconciler first learns of it, and keeps it
(seed 002 §4.3: filter by ``biz_date``, never by ``created_at``). With the cut-off at 00:00 in UTC
(the default) the business date is the UTC calendar date, which is what the PSP's settlement report
uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo


@dataclass(frozen=True, slots=True)
class BusinessCalendar:
    """A cut-off of 00:00 makes the business date the local calendar date. A later cut-off (e.g.
    22:00) closes the day early: what happens at or after 22:00 local is booked on the next date."""

    tz: tzinfo
    cutoff: time

    def date_of(self, at_ms: int) -> date:
        local = datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(self.tz)
        if self.cutoff != time(0, 0) and local.time() >= self.cutoff:
            return local.date() + timedelta(days=1)
        return local.date()

    def window_ms(self, day: date) -> tuple[int, int]:
        """The business day ``day`` as [start, end) in epoch milliseconds."""
        if self.cutoff == time(0, 0):
            start = datetime.combine(day, self.cutoff, tzinfo=self.tz)
            end = datetime.combine(day + timedelta(days=1), self.cutoff, tzinfo=self.tz)
        else:
            start = datetime.combine(day - timedelta(days=1), self.cutoff, tzinfo=self.tz)
            end = datetime.combine(day, self.cutoff, tzinfo=self.tz)
        return int(start.timestamp() * 1000), int(end.timestamp() * 1000)


def parse_cutoff(text: str) -> time | None:
    """``HH:MM`` (24 h) or None when it is not one."""
    parts = text.split(":")
    if len(parts) != 2 or not all(p.isdigit() and len(p) == 2 for p in parts):
        return None
    hour, minute = int(parts[0]), int(parts[1])
    return time(hour, minute) if hour < 24 and minute < 60 else None
