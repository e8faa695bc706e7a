"""How a long job reports its progress and results to the person who started it.

Library code takes a `Progress` as an argument and calls `task(...)` for a countable
job (steps, batches, examples, documents) and `say(...)` for a result; it never writes
to the terminal itself. The base `Progress` (the library's default) only logs the
results. Command lines pass a `TerminalProgress`: on a terminal a live bar (tqdm) per
job, elsewhere (a CI log, nohup, a file) one plain line every `interval` seconds, and
each result as one line on stderr. The full log (absl) goes to output_dir as before.

tqdm draws the bars: it writes to stderr (stdout stays for data), computes rates and
the remaining time itself, redraws in place on a terminal, keeps result lines above
its bars (`tqdm.write`), and has no dependencies of its own.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Iterable, Iterator

from absl import logging


class Task:
    """One countable job; a context manager. This base shows nothing."""

    def __enter__(self) -> Task:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, done: int, **fields) -> None:
        """`done` units so far (absolute); `fields` (e.g. loss=0.69) shown beside them."""

    def close(self) -> None:
        pass


class Progress:
    """Where a job reports. This base logs results (absl) and shows no progress."""

    def task(
        self,
        description: str,
        total: int | None = None,
        unit: str = "it",
        initial: int = 0,
        leave: bool = True,
    ) -> Task:
        """A job of `total` `unit`s (None: unknown), `initial` of them done before;
        `leave=False`: its bar disappears when done (its result is said instead)."""
        return Task()

    def say(self, message: str) -> None:
        logging.info("%s", message)

    def iterate(
        self, items: Iterable, description: str, total: int | None = None, unit: str = "it"
    ) -> Iterator:
        """Yields `items`, counting each one done (when the next is asked for)."""
        with self.task(description, total=total, unit=unit) as bar:
            for done, item in enumerate(items, 1):
                yield item
                bar.update(done)


def format_seconds(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def format_fields(fields: dict) -> str:
    parts = []
    for key, value in fields.items():
        if isinstance(value, float):
            value = f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
        parts.append(f"{key} {value}")
    return "  ".join(parts)


class LineTask(Task):
    """Plain lines: one when `interval` seconds have passed since the start or the
    last line, and one at the end (unless the job was transient, `leave=False`, and
    short enough to show no line at all).

    A line: `train: step 40/100 (40%)  loss 0.6931  examples/s 30.1  elapsed 0:12  ETA 0:18`.
    """

    def __init__(
        self, stream, description, total, unit, initial, interval, leave, clock=time.monotonic
    ):
        self.stream, self.description, self.total, self.unit = stream, description, total, unit
        self.initial, self.interval, self.leave, self.clock = initial, interval, leave, clock
        self.start = self.last_line = clock()
        self.done, self.fields, self.shown, self.lines = initial, {}, True, 0

    def update(self, done: int, **fields) -> None:
        finished = self.total is not None and done >= self.total
        if finished and self.shown and self.done == done:
            return  # The end is shown already.
        self.done, self.fields, self.shown = done, fields, False
        now = self.clock()
        if now - self.last_line >= self.interval or (finished and (self.leave or self.lines)):
            self._line(now)

    def _line(self, now: float) -> None:
        self.last_line, self.shown, self.lines = now, True, self.lines + 1
        elapsed = now - self.start
        count = f"{self.unit} {self.done}"
        if self.total:
            count += f"/{self.total} ({100.0 * self.done / self.total:.0f}%)"
        line = [f"{self.description}: {count}"]
        if self.fields:
            line.append(format_fields(self.fields))
        line.append(f"elapsed {format_seconds(elapsed)}")
        if self.total and self.done > self.initial:
            rate = (self.done - self.initial) / max(elapsed, 1e-9)
            line.append(f"ETA {format_seconds((self.total - self.done) / rate)}")
        self.stream.write("  ".join(line) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if not self.shown and (self.leave or self.lines):
            self._line(self.clock())


# The size a bar is drawn for where the terminal reports none.
FALLBACK_SIZE = (80, 24)


def reported_size(stream) -> tuple[int, int] | None:
    """The terminal's (columns, lines), or None where it reports none (0 x 0: a
    container's or serial console's terminal before it is sized)."""
    try:
        columns, lines = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None
    return (columns, lines) if columns > 0 and lines > 0 else None


class BarTask(Task):
    """A live tqdm bar (on a terminal). On a terminal that reports 0 columns or lines,
    tqdm draws nothing (its last line included): the bar then has FALLBACK_SIZE."""

    def __init__(self, stream, description, total, unit, initial, leave):
        from tqdm import tqdm  # pylint: disable=g-import-not-at-top

        size = {}
        if reported_size(stream) is None:
            size = dict(dynamic_ncols=False, ncols=FALLBACK_SIZE[0], nrows=FALLBACK_SIZE[1])
        bar_format = None
        if total:
            bar_format = (
                "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} "
                "[elapsed {elapsed}, ETA {remaining}{postfix}]"
            )
        self.bar = tqdm(
            total=total,
            initial=initial,
            desc=description,
            unit=unit,
            file=stream,
            leave=leave,
            bar_format=bar_format,
            **({"dynamic_ncols": True} | size),
        )

    def update(self, done: int, **fields) -> None:
        if fields:
            self.bar.set_postfix_str(format_fields(fields), refresh=False)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.bar.close()


class TerminalProgress(Progress):
    """Progress on stderr: live bars on a terminal, elsewhere a plain line every
    `interval` seconds per job."""

    def __init__(self, stream=None, interval: float = 30.0, live: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        if live is None:
            live = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.live = live

    def task(self, description, total=None, unit="it", initial=0, leave=True) -> Task:
        if self.live:
            return BarTask(self.stream, description, total, unit, initial, leave)
        return LineTask(self.stream, description, total, unit, initial, self.interval, leave)

    def say(self, message: str) -> None:
        logging.info("%s", message)
        if self.live:
            from tqdm import tqdm  # pylint: disable=g-import-not-at-top

            tqdm.write(message, file=self.stream)
        else:
            self.stream.write(message + "\n")
        self.stream.flush()
