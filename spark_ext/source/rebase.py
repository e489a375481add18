"""Spark's rebase of dates and timestamps from the hybrid Julian calendar to the proleptic Gregorian one.

Spark 2.4 and earlier (and later Spark in LEGACY write mode) wrote dates and timestamps as days / micros counted in
the hybrid calendar: Julian before 1582-10-15, Gregorian from then on. Spark 3+ reads such a value by taking its
calendar fields (year, month, day, time of day) in the hybrid calendar and building the same fields in the
proleptic Gregorian calendar, counting a Julian-only leap day (1500-02-29) as the day after February 28
(RebaseDateTime.rebaseJulianToGregorianDays: a table of switch days for years 1 and later, the calendar fields
for earlier ones). These are vectorised copies of those rules, checked against Spark 4.3 on every day from
-1,100,000 to -141,000 (years -1042 to 1583). Timestamps are rebased here only in UTC, where the rebase is the
day's rebase with the time of day kept; in other zones Spark also applies the zone's offsets before 1900, as the
JVM's two time-zone libraries disagree on them (see ``spark_ext.source.legacy_files``).
"""

from __future__ import annotations

import numpy as np

# RebaseDateTime.julianGregDiffSwitchDay / julianGregDiffs: from each Julian day on, the difference to add.
_SWITCH_DAYS = np.array(
    [
        -719164,
        -682945,
        -646420,
        -609895,
        -536845,
        -500320,
        -463795,
        -390745,
        -354220,
        -317695,
        -244645,
        -208120,
        -171595,
        -141427,
    ],
    dtype=np.int64,
)
_DIFFS = np.array([2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, 0], dtype=np.int64)

COMMON_ERA_START_DAY = int(_SWITCH_DAYS[0])  # 0001-01-01 in the Julian calendar
FIRST_UNCHANGED_DAY = int(_SWITCH_DAYS[-1])  # 1582-10-15: this day and later ones are not rebased
# RebaseDateTime.lastSwitchJulianTs: from 1900-01-01T00:00:00Z on, no time zone rebases a timestamp.
FIRST_UNCHANGED_SECOND = -2208988800
_EPOCH_JULIAN_DAY_NUMBER = 2440588  # 1970-01-01


def julian_to_gregorian_days(days: np.ndarray) -> np.ndarray:
    """Spark's rebase of days since the epoch (int64) written in the hybrid calendar: the proleptic Gregorian day
    with the same year, month and day (a Julian-only Feb 29 counts as the day after Feb 28)."""
    days = np.asarray(days, dtype=np.int64)
    index = np.searchsorted(_SWITCH_DAYS, days, side="right") - 1
    rebased = days + _DIFFS[np.clip(index, 0, None)]
    before_era = days < COMMON_ERA_START_DAY
    if before_era.any():
        rebased[before_era] = _julian_fields_as_gregorian(days[before_era])
    return rebased


def julian_to_gregorian_utc(values: np.ndarray, units_per_day: int) -> np.ndarray:
    """Spark's rebase in UTC of timestamps (int64, ``units_per_day`` to a day) written in the hybrid calendar:
    the day is rebased as a date, the time of day kept."""
    values = np.asarray(values, dtype=np.int64)
    days, time_of_day = np.divmod(values, units_per_day)
    return julian_to_gregorian_days(days) * units_per_day + time_of_day


def _julian_fields_as_gregorian(days: np.ndarray) -> np.ndarray:
    """RebaseDateTime.localRebaseJulianToGregorianDays: the Julian date's (astronomical) year and month, day 1 in
    the proleptic Gregorian calendar, plus the day of the month less one."""
    year, month, day = _julian_date(days + _EPOCH_JULIAN_DAY_NUMBER)
    return _gregorian_epoch_day(year, month) + day - 1


def _julian_date(julian_day_number: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Year (astronomical: 0 is 1 BC), month and day of the Julian calendar date of each Julian Day Number."""
    c = julian_day_number + 32082
    d = (4 * c + 3) // 1461
    e = c - (1461 * d) // 4
    m = (5 * e + 2) // 153
    day = e - (153 * m + 2) // 5 + 1
    month = m + 3 - 12 * (m // 10)
    year = d - 4800 + m // 10
    return year, month, day


def _gregorian_epoch_day(year: np.ndarray, month: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of the first of ``month`` in ``year`` (astronomical), proleptic Gregorian."""
    y = year - (month <= 2)
    era = y // 400
    year_of_era = y - era * 400
    day_of_year = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468
