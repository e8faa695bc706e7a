"""How a long run starts and ends: one run per output, and a clear end when stopped.

One run per output: a lock file that names the process holding it.

A long job takes the lock of what it writes before any work: a run's output_dir
(`<output_dir>/.run.lock`), or a path it replaces as a whole, such as an export
folder or a shard file (`.<name>.lock` beside it). A second run on the same output
while the first is alive stops at once with `LockedError`, naming the other process
(pid, host, start time, command). Hidden names keep the lock out of every output
glob (`data_prep.records.expand_globs` skips them).

The lock is an exclusive `flock` on that file, held as long as the process lives:
the kernel drops it when the process ends in any way, kill -9 included, so a lock
file left by a killed run is stale by construction and the next run takes it over.
The file holds JSON {"pid", "host", "process_start", "started", "command"}, read only
to say who holds it. On a file system without `flock` (some network and FUSE file
systems), the file's content decides instead: on the same host, a lock whose
process is gone (`os.kill(pid, 0)`, or another process now has that pid) is stale; a
lock from another host cannot be checked from here and is refused, with the path to
delete once that run is known to be gone. On NFS, `flock` works across hosts (the
server frees the locks of a host that died after its lease). Paths of other file
systems (`gs://`...) take no lock: they have no exclusive create.

Under MultiWorkerMirrored every worker writes to one output_dir: only the chief takes
the lock (`is_chief`).

A stopped run ends with a line that says how to go on and a documented exit code
(`common.errors.EXIT_STOPPED` after SIGTERM, `EXIT_INTERRUPTED` after Ctrl-C (SIGINT),
`EXIT_LOST_WORKER`): `exit_on_sigterm` makes either signal end a run at once wherever it
is (temporary files are removed on the way out, so nothing half-written stays under its
name); the training loop replaces that handler with its own while it trains, to save a
checkpoint first (a second Ctrl-C then ends it at once).

A run that resumes another in the same output_dir keeps the record of every part in
run_config.json (`write_run_config`): the first part's settings, and what each later
part changed, from the step it took effect.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from typing import Callable

from absl import logging

from common.errors import (
    EXIT_INTERRUPTED,
    EXIT_LOST_WORKER,
    EXIT_STOPPED,
    LostWorkerError,
    UserError,
)
from common import file_io

DIRECTORY_LOCK = ".run.lock"
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class LockedError(UserError):
    """Another live run holds the output; the message names it."""


def lock_path_for_directory(directory: str) -> str:
    """The lock of a run's output folder: a hidden file inside it."""
    return os.path.join(directory, DIRECTORY_LOCK)


def lock_path_for_file(path: str) -> str:
    """The lock of a file or folder written as a whole: a hidden file beside it."""
    directory, name = os.path.split(os.path.normpath(path))
    return os.path.join(directory, f".{name}.lock")


def _process_start(pid: int) -> str | None:
    """The start time of a process (clock ticks since boot), or None where unknown:
    with the pid, it names one process even when pids are reused."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after it.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _alive(holder: dict) -> bool:
    """Whether the process a lock names (on this host) still runs."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Alive, another user's.
        pass
    recorded, current = holder.get("process_start"), _process_start(pid)
    return recorded is None or current is None or recorded == current


def _describe(holder: dict) -> str:
    if not holder:
        return "a process that has not yet written its name"
    started = holder.get("started")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
        if isinstance(started, (int, float))
        else "at an unknown time"
    )
    return (
        f"pid {holder.get('pid')} on host {holder.get('host')}, started {when}: "
        f"{holder.get('command') or '(command unknown)'}"
    )


def _read(fd: int) -> dict:
    """The holder a lock file names ({} while it is being written or if damaged)."""
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    try:
        value = json.loads(data.decode("utf-8"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _this_process() -> dict:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "process_start": _process_start(os.getpid()),
        "started": time.time(),
        "command": " ".join(sys.argv),
    }


class RunLock:
    """A held lock; `release` (or the end of the process) frees it."""

    def __init__(self, path: str, fd: int | None, holder: dict):
        self.path, self.fd, self.holder = path, fd, holder

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if os.path.exists(self.path) and os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                os.remove(self.path)
        except OSError:
            pass
        os.close(self.fd)  # Frees the flock.
        self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def _refuse(what: str, path: str, other: dict, same_host: bool) -> LockedError:
    hint = (
        "Wait for it to end or stop it"
        if same_host
        else "It runs on another host, so this host cannot tell whether it is alive: "
        f"once it is gone, delete {path}"
    )
    return LockedError(
        f"{what} is in use by another run: {_describe(other)}. {hint}, or give this run "
        f"another output. (Lock file: {path})"
    )


def acquire(path: str, what: str) -> RunLock | None:
    """Takes the lock file `path` for this process, or raises LockedError.

    Args:
      path: the lock file (`lock_path_for_directory`, `lock_path_for_file`).
      what: what it guards, for the message (e.g. "--output_dir=out").

    Returns:
      The lock (freed by `release` or when the process ends), or None for a path of
      another file system, which takes no lock.
    """
    if "://" in path:
        return None
    me = _this_process()
    for _ in range(10):
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise (_under_a_file(path, what, e) or file_io.cannot_write(path, e) or e) from e
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                supported = True
            except BlockingIOError:
                other = _read(fd)
                if other.get("pid") == me["pid"] and other.get("host") == me["host"]:
                    # This process holds it already (a runner's main run twice in
                    # one process): the first holder frees it.
                    os.close(fd)
                    return RunLock(path, None, me)
                raise _refuse(what, path, other, other.get("host") in (None, me["host"]))
            except OSError as e:
                if e.errno not in _NO_FLOCK:
                    raise
                supported = False
            # The file may have been removed (released) between open and flock.
            if not os.path.exists(path) or os.stat(path).st_ino != os.fstat(fd).st_ino:
                os.close(fd)
                continue
            if not supported:
                other = _read(fd)
                same_host = other.get("host") in (None, me["host"])
                if other and other.get("pid") != me["pid"] and (not same_host or _alive(other)):
                    raise _refuse(what, path, other, same_host)
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(me).encode("utf-8"))
            return RunLock(path, fd, me)
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise
    raise LockedError(f"{what}: could not take the lock file {path}; try again.")


def _under_a_file(path: str, what: str, error: OSError) -> UserError | None:
    """The error for people when the folder of lock file `path` cannot be made because
    it, or a folder above it, is a regular file; None for any other error."""
    if error.errno not in (errno.ENOTDIR, errno.EEXIST):
        return None
    folder = os.path.dirname(path) or "."
    while folder and not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not folder or os.path.isdir(folder):
        return None
    return UserError(
        f"{what}: {folder} is a file, not a folder, so nothing can be written under it. "
        "Give another path."
    )


def is_chief(tf_config: str | None) -> bool:
    """Whether this process is the chief of the cluster in TF_CONFIG (the worker that
    writes output_dir): the "chief" task, else worker 0; any process without a
    cluster."""
    if not tf_config:
        return True
    try:
        config = json.loads(tf_config)
        cluster, task = config.get("cluster") or {}, config.get("task") or {}
    except (ValueError, AttributeError):
        return True
    return is_chief_task(cluster, task.get("type"), int(task.get("index", 0) or 0))


def is_chief_task(cluster, task_type: str | None, index: int) -> bool:
    """The chief's rule, for a cluster (its job names) and this process's task: the
    "chief" task, else worker 0; any process without a cluster."""
    if not cluster or task_type in (None, "chief"):
        return True
    return task_type == "worker" and index == 0 and "chief" not in cluster


def hold(path: str, what: str) -> RunLock | None:
    """`acquire`, freed when the program exits."""
    lock = acquire(path, what)
    if lock is not None:
        atexit.register(lock.release)
    return lock


def hold_directory(directory: str, what: str) -> RunLock | None:
    """Holds the lock of a run's output folder until the program exits."""
    return hold(lock_path_for_directory(directory), what)


def hold_file(path: str, what: str) -> RunLock | None:
    """Holds the lock of a file or folder written as a whole until the program exits."""
    return hold(lock_path_for_file(path), what)


def end_run(message: str, exit_code: int) -> None:
    """Says `message` once on stderr (and in the log file), and ends the program with
    `exit_code`. Logged at INFO: a warning would show on stderr a second time."""
    logging.info("%s", message)
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(exit_code)


# The signals that stop a run with what it had done kept (a checkpoint, whole files):
# their names in train_summary.json ("stopped_by"), as messages say them, and the exit
# code of a run they stopped.
STOP_SIGNALS = {
    "SIGTERM": (signal.SIGTERM, "SIGTERM", EXIT_STOPPED),
    "SIGINT": (signal.SIGINT, "Ctrl-C (SIGINT)", EXIT_INTERRUPTED),
}


def exit_on_sigterm(
    program: str,
    kept: str = "what was complete is kept",
    on_stop: Callable[[int], None] | None = None,
) -> None:
    """SIGTERM or Ctrl-C (SIGINT) ends the program at once with one line saying so,
    with EXIT_STOPPED or EXIT_INTERRUPTED; `kept` says what it leaves; `on_stop(code)`,
    if given, is called first with that exit code (e.g. to stop helper processes).

    SystemExit is raised in the main thread wherever it is, so `finally` blocks and
    the atomic writers' clean-up run: files being written are removed, complete ones
    stay, and the same command redoes what was not finished. The line is printed as
    the program exits, after the clean-up's own last lines (a progress bar's). The
    same signal again ends the program at once, clean-up or not. A signal that comes
    once the program's work is done, as it exits (atexit), lets it end as it would.
    """

    def handler(signum, frame):
        signal.signal(signum, signal.SIG_DFL)
        if frame is not None and not _in_program(frame):
            return  # Its exit's clean-up (atexit): the work is done, let it end.
        _, said, code = STOP_SIGNALS[signal.Signals(signum).name]
        message = f"{program}: stopped by {said}; {kept}. Run the same command again to finish."
        logging.info("%s", message)
        # sys.stderr as it is at exit: a stream set for a block (e.g. one that filters
        # worker processes' lines) is closed by then.
        atexit.register(lambda: print(message, file=sys.stderr, flush=True))
        if on_stop is not None:
            on_stop(code)
        raise SystemExit(code)

    for signum, _, _ in STOP_SIGNALS.values():
        try:
            signal.signal(signum, handler)
        except ValueError:  # Not the main thread: leave the signals as they are.
            return


class _CtrlCWatch:
    """Sees Ctrl-C the moment it is pressed, from a thread: Python runs a signal's
    handler only when the main thread runs Python again, not while it waits for a
    compiled training loop. The C-level handler writes each signal's number to the
    wakeup fd (`signal.set_wakeup_fd`), which this thread reads."""

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        self.lock = threading.Lock()
        self.note, self.pressed = None, 0
        threading.Thread(target=self._watch, name="ctrl-c", daemon=True).start()

    def _watch(self) -> None:
        while True:
            for signum in os.read(self.read_fd, 64):
                if signum != signal.SIGINT:
                    continue
                with self.lock:
                    if self.note is None:
                        continue
                    self.pressed += 1
                    first = self.pressed == 1
                if first:
                    _say(self.note[0])
                else:
                    logging.info("%s", self.note[1])
                    _say(self.note[1])
                    os._exit(EXIT_INTERRUPTED)  # At once: the main thread may be in C.


def _say(line: str) -> None:
    print(f"\n{line}" if sys.stderr.isatty() else line, file=sys.stderr, flush=True)


_ctrl_c_watch: _CtrlCWatch | None = None


@contextlib.contextmanager
def second_ctrl_c_ends_at_once(first: str, second: str):
    """In this block, the first Ctrl-C is said at once (`first`: what will happen, the
    main thread's handler doing it when it can), and a second one ends the program at
    once with `second` and EXIT_INTERRUPTED, wherever the main thread is: as kill -9
    would, so only what is already whole is kept (the last checkpoint). Where the
    wakeup fd is not free (not the main thread, or an event loop holds it), neither
    is said, and the main thread's handler decides alone. Yields whether it watches."""
    global _ctrl_c_watch
    if _ctrl_c_watch is None:
        _ctrl_c_watch = _CtrlCWatch()
    watch = _ctrl_c_watch
    try:
        previous = signal.set_wakeup_fd(watch.write_fd, warn_on_full_buffer=False)
    except ValueError:  # Not the main thread.
        yield False
        return
    if previous not in (-1, watch.write_fd):  # Another's: leave it theirs.
        signal.set_wakeup_fd(previous)
        yield False
        return
    with watch.lock:
        watch.note, watch.pressed = (first, second), 0
    try:
        yield True
    finally:
        with watch.lock:
            watch.note = None
        signal.set_wakeup_fd(-1)


@contextlib.contextmanager
def children_ignore_ctrl_c():
    """Processes started in this block ignore Ctrl-C (SIGINT), from their first
    instruction on: a terminal sends it to every process of the job, and it is this
    one's to handle (it stops them). An ignored signal stays ignored across exec, and
    Python then leaves it so. This process ignores it too meanwhile."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # Not the main thread.
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# Settings that a resumed training run must share with the run it resumes, or its
# steps mean other examples and another schedule (a runner adds its own).
RESUME_SETTINGS = (
    "train_batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "num_train_steps",
    "num_warmup_steps",
    "max_seq_length",
    "seed",
)


def _in_program(frame) -> bool:
    """Whether `frame` runs under a module's code (the program), not in a callback of
    the interpreter's exit (atexit), which runs without one."""
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            return True
        frame = frame.f_back
    return False


RESUMED = "resumed"


def checkpoint_step(prefix: str) -> int | None:
    """The global step of a Trainer checkpoint prefix (`<output_dir>/ckpt-<step>`)."""
    found = re.search(r"-(\d+)$", prefix or "")
    return int(found.group(1)) if found else None


# The record of a run's settings in its output folder (`write_run_config`).
RUN_CONFIG = "run_config.json"


def write_run_config(path: str, values: dict, keys=(), resumes: str | None = None) -> list[str]:
    """Writes a run's settings `values` to `path` (run_config.json).

    A run that resumes another (`resumes`: the checkpoint it resumes from) keeps that
    run's record: the first part's settings stay as they were, and the settings this
    part changes are added to the list under "resumed", `{"step": <the checkpoint's
    step>, "changed": {name: [old, new]}}`. Each changed setting of `keys` (those that
    give the steps already taken another meaning: batch, schedule, seed...) is named in
    one warning. Returns those settings' descriptions.
    """
    values = json.loads(json.dumps(values))  # As the file holds them (lists, not tuples).
    record = _read_record(path) if resumes else None
    if record is None:
        file_io.write_json(path, values)
        return []
    current = {k: v for k, v in record.items() if k != RESUMED}
    for part in record.get(RESUMED, []):
        current.update({k: new for k, (_, new) in part.get("changed", {}).items()})
    changed = {
        k: [current.get(k), values.get(k)]
        for k in sorted(set(current) | set(values))
        if current.get(k) != values.get(k)
    }
    said = [f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items() if k in keys]
    if said:
        logging.warning(
            "Resuming %s at step %s with other settings than the steps already taken: %s. "
            "Give the earlier values to resume the same run, or another output_dir.",
            os.path.dirname(path) or ".",
            checkpoint_step(resumes),
            "; ".join(said),
        )
    if changed:
        parts = record.get(RESUMED, []) + [{"step": checkpoint_step(resumes), "changed": changed}]
        file_io.write_json(path, dict(record, **{RESUMED: parts}))
    return said


def _read_record(path: str) -> dict | None:
    """run_config.json of the run being resumed; None if there is none (or it is not
    a record: a new one replaces it)."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get(RESUMED, []), list):
        return None
    return record


def hold_run_outputs(output_dir: str | None, export_dir: str | None, multi_worker: bool) -> None:
    """A runner's locks: its output_dir and its export folder. Under MultiWorkerMirrored
    (`multi_worker`) only the chief of TF_CONFIG's cluster takes them: every worker
    writes to the same output_dir."""
    if multi_worker and not is_chief(os.environ.get("TF_CONFIG")):
        return
    if output_dir:
        hold_directory(output_dir, f"--output_dir={output_dir}")
    if export_dir:
        hold_file(export_dir, f"--export_dir={export_dir}")


class StoppedAfterTraining(Exception):
    """SIGTERM or Ctrl-C came after the last training step (e.g. during the last
    epoch's evaluation): training is complete and checkpointed, and the run stops
    before what follows it (the final evaluation, prediction and export)."""

    def __init__(self, signal_name: str, step: int):
        super().__init__(f"{signal_name} after the last training step ({step})")
        self.signal_name, self.step = signal_name, step


def run_training(train_fn, output_dir: str, summary_file: str) -> None:
    """Runs `train_fn` (which returns whether training completed).

    A run stopped by SIGTERM or Ctrl-C (it saved a checkpoint) ends the program with
    EXIT_STOPPED or EXIT_INTERRUPTED, a run that lost a worker with EXIT_LOST_WORKER;
    each says in one line where it stopped and how to resume. A signal after the last
    training step (`StoppedAfterTraining`) says that training had finished.
    """
    try:
        complete = train_fn()
    except LostWorkerError as e:
        end_run(str(e), EXIT_LOST_WORKER)
    except StoppedAfterTraining as e:
        _, said, code = STOP_SIGNALS[e.signal_name]
        end_run(
            f"Stopped by {said} after the last training step ({e.step}): training is "
            f"complete, its checkpoint in {output_dir}; nothing was evaluated, predicted "
            f"or exported after it. Run the same command again to do them.",
            code,
        )
    if complete:
        return
    path = os.path.join(output_dir, summary_file)
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        summary = {}
    at = (
        f" at step {summary['global_step']} of {summary['num_train_steps']}"
        if "num_train_steps" in summary
        else ""
    )
    _, said, code = STOP_SIGNALS.get(summary.get("stopped_by"), STOP_SIGNALS["SIGTERM"])
    end_run(
        f"Stopped by {said}{at}, checkpoint saved in {output_dir}: run the same command "
        f"again to resume.",
        code,
    )
