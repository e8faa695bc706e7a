"""The Python processes the tests start, forked from an interpreter that has already
imported TensorFlow, so that each skips TensorFlow's import: 2.2-2.5 s of CPU in each
of the hundred-odd processes of the suite that import it. Measured on 2 cores of an
AMD EPYC, alternating: a tiny run_classifier.py run (train, evaluate, predict) took
8.7 s against 13.8 s started afresh, and four runner test files 106 s against 122 s.

`install()` (conftest.py, in each test worker) hooks `subprocess.Popen`. A command
`[sys.executable, <script.py> | -c <code> | -m <module>, args...]` whose program
imports TensorFlow (`_IMPORTS_TENSORFLOW`), whose environment sets
TF_CPP_MIN_LOG_LEVEL (the tests that check what a user's terminal shows at start-up
leave it unset, and so get a fresh interpreter) and that asks nothing else of `Popen`
(no preexec_fn, pass_fds, user or group) is sent to a prewarmed interpreter
(this file run as a script): one per worker and environment (`READ_AT_IMPORT`),
started on first use. It
forks; the child takes the request's stdin, stdout and stderr, working directory,
environment, session and argv, and runs the program as `python` would (`__main__`,
sys.argv, sys.path[0]); its exceptions and its exit end it as they end `python`. The
test's `Popen` holds the child's pid (signals, kill -9 and process groups work as
for any process), and its exit status comes from the prewarmed interpreter, the
child's parent, which waits for it.

What the child does not redo: TensorFlow's, Keras', NumPy's and absl's import (their
module-level state is that of a fresh import: nothing else ran). NumPy's global random
state is seeded again from the OS, as a new process's is. Any other command, or any
other request, starts as before. BERT_TESTS_FRESH_PROCESSES=1 turns it off: in the
tests' environment for all, in one command's `env` for that command (a program that
tells which modules it imported).
"""

from __future__ import annotations

import gc
import inspect
import io
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading

PRELOAD = ("numpy", "absl.app", "absl.flags", "absl.logging", "tensorflow", "keras")
# The environment variables that the preloaded modules (or Python) may read at import:
# a request whose values differ goes to another prewarmed interpreter. The child takes
# the request's whole environment before the program starts.
READ_AT_IMPORT = re.compile(
    r"^(TF_|TENSORFLOW|KERAS|PYTHON|OMP_|MKL|OPENBLAS|CUDA|NVIDIA|LD_|LC_|LANG$|HOME$|TMPDIR$)"
)
# Read when used, never at import.
READ_LATER = frozenset({"TF_CONFIG"})
OFF = "BERT_TESTS_FRESH_PROCESSES"
MAX_INTERPRETERS = 3  # per test worker, one per environment
STATUS = struct.Struct("=i")
MAX_REQUEST = 1 << 16  # bytes of a request (its argv and environment)


# ---------------------------------------------------------------------------------
# The prewarmed interpreter (this file as a script) and the child it forks.


def _serve(control: socket.socket):
    """Forks a child per request until the test worker closes `control`. Returns in
    the child only: (request, [stdin, stdout, stderr])."""
    waiting = {}  # pidfd -> (pid, status channel)
    while True:
        readable, _, _ = select.select([control, *waiting], [], [])
        for fd in readable:
            if fd is control:
                message, fds, _, _ = socket.recv_fds(control, 1 << 22, 4)
                if not message:
                    os._exit(0)
                stdio, channel = fds[:3], socket.socket(fileno=fds[3])
                pid = os.fork()
                if pid == 0:
                    control.close()
                    channel.close()
                    for pidfd, (_, other) in waiting.items():
                        os.close(pidfd)
                        other.close()
                    return json.loads(message), stdio
                for stdio_fd in stdio:
                    os.close(stdio_fd)
                waiting[os.pidfd_open(pid)] = (pid, channel)
                control.sendall(STATUS.pack(pid))
            else:
                pid, channel = waiting.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                try:
                    channel.sendall(STATUS.pack(status))
                except OSError:  # The test is gone.
                    pass
                channel.close()


def _stdio() -> None:
    """sys.stdin, stdout and stderr over the child's file descriptors 0, 1 and 2, as
    Python makes them at start-up (stdout line-buffered on a terminal only, stderr
    always, both unbuffered under -u/PYTHONUNBUFFERED)."""
    made = []
    for fd, name, mode in ((0, "stdin", "rb"), (1, "stdout", "wb"), (2, "stderr", "wb")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, mode, closefd=False)
        if mode == "rb":
            buffered = io.BufferedReader(raw)
        else:
            buffered = io.BufferedWriter(raw)
        made.append(
            io.TextIOWrapper(
                buffered,
                encoding=old.encoding,
                errors=old.errors,
                line_buffering=name == "stderr" or (name == "stdout" and raw.isatty()),
                write_through=old.write_through,
            )
        )
    sys.stdin, sys.stdout, sys.stderr = made
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made


def _become(request: dict, stdio: list[int]) -> None:
    """The forked child takes the request's stdio, session, directory, environment
    and argv."""
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    for fd in set(stdio):
        if fd > 2:
            os.close(fd)
    _stdio()
    if request["new_session"]:
        os.setsid()
    if request["cwd"] is not None:
        os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import numpy

    numpy.random.seed()
    sys.orig_argv = [sys.executable, *request["args"]]


def _run(request: dict) -> None:
    """Runs the program as `python <args>` does, in a new `__main__`; what it raises
    ends the process as it ends `python`."""
    import runpy
    import types

    args = request["args"]
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    if args[0] == "-m":
        sys.argv = ["-m", *args[2:]]
        sys.path[0] = os.getcwd()
        runpy._run_module_as_main(args[1], alter_argv=True)
        return
    if args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        sys.path[0] = ""
        code = compile(args[1], "<string>", "exec")
    else:
        path = args[0]
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.realpath(path))
        main.__file__ = os.path.abspath(path)
        main.__cached__ = None
        with open(path, "rb") as source:
            code = compile(source.read(), main.__file__, "exec")
    exec(code, main.__dict__)


def _main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    for name in PRELOAD:
        __import__(name)
    # The preloaded modules' objects live as long as any child: out of the collector's
    # sweeps (each child of a tiny run spent 0.2 s of 4.4 s of CPU sweeping them).
    gc.freeze()
    control.sendall(b"ready")
    request, stdio = _serve(control)
    _become(request, stdio)
    _run(request)


# ---------------------------------------------------------------------------------
# The test worker's side.


class _Interpreter:
    """One prewarmed interpreter, for one environment."""

    def __init__(self, env: dict):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        _state.starting = True
        try:
            self.process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), str(theirs.fileno())],
                env=env,
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # TensorFlow's import lines; a failed start
            )  # is no "ready": its commands then start as before.
        finally:
            _state.starting = False
            theirs.close()
        self.control = ours
        self.ready = None  # Known once the first request waits for it.

    def start(self, request: dict, stdio: tuple[int, int, int]):
        """(pid, status channel) of the child started for `request`, or None if this
        interpreter cannot start it."""
        with self._lock:
            if self.ready is None:
                self.ready = self.control.recv(16) == b"ready"
            if not self.ready:
                return None
            message = json.dumps(request).encode()
            if len(message) > MAX_REQUEST:
                return None
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                socket.send_fds(self.control, [message], [*stdio, theirs.fileno()])
                reply = self.control.recv(STATUS.size)
            except OSError:
                ours.close()
                self.ready = False
                return None
            finally:
                theirs.close()
            if len(reply) != STATUS.size:
                ours.close()
                self.ready = False
                return None
            return STATUS.unpack(reply)[0], ours


_state = threading.local()
_interpreters: dict = {}
_interpreters_lock = threading.Lock()
_real = {}


def _request(popen_args: dict):
    """The prewarmed interpreter's request for a Popen call, or None to start it as
    before."""
    args, env = popen_args["args"], popen_args["env"]
    if getattr(_state, "starting", False) or popen_args["shell"]:
        return None
    if isinstance(args, (str, bytes, os.PathLike)):
        return None
    args = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in args]
    if any(not isinstance(a, str) for a in args) or len(args) < 2:
        return None
    executable = popen_args["executable"]
    if args[0] != sys.executable or executable not in (None, sys.executable):
        return None  # Another interpreter (the venv's base one has other packages).
    if (
        popen_args["preexec_fn"] is not None
        or popen_args["pass_fds"]
        or not popen_args["close_fds"]
        or not popen_args["restore_signals"]
        or popen_args["gid"] is not None
        or popen_args["gids"] is not None
        or popen_args["uid"] is not None
        or popen_args["umask"] >= 0
        or popen_args.get("process_group", -1) not in (None, -1)
    ):
        return None
    env = dict(os.environ if env is None else env)
    if "TF_CPP_MIN_LOG_LEVEL" not in env or env.get(OFF) == "1":
        return None
    program = args[1:]
    if program[0] in ("-c", "-m"):
        if len(program) < 2:
            return None
    elif program[0].startswith("-") or not program[0].endswith(".py"):
        return None
    cwd = popen_args["cwd"]
    cwd = None if cwd is None else os.fspath(cwd)
    if cwd is not None and not os.path.isdir(cwd):
        return None
    if not _IMPORTS_TENSORFLOW.search(_program_text(program, cwd)):
        return None
    return {
        "args": program,
        "env": env,
        "cwd": cwd,
        "new_session": bool(popen_args["start_new_session"]),
    }


# A program that imports TensorFlow names it, or one of the runners (a driver that
# runs them in one process names them or imports them by name). Any other program
# gains nothing from the prewarmed interpreter and starts as before, as one whose
# parent must be the test (e.g. timed with `os.wait4`) does.
_IMPORTS_TENSORFLOW = re.compile(
    r"tensorflow|^\s*(import|from) run_\w+|import_module", re.MULTILINE
)


def _program_text(program: list[str], cwd: str | None) -> str:
    """The -c code, or the source of the -m module or the script ("" if none)."""
    if program[0] == "-c":
        return program[1]
    if program[0] == "-m":  # In the working directory (sys.path[0]), or importable here.
        import importlib.util

        path = os.path.join(cwd or ".", *program[1].split(".")) + ".py"
        if not os.path.isfile(path):
            try:
                spec = importlib.util.find_spec(program[1])
            except (ImportError, ValueError):
                return ""
            path = spec.origin if spec is not None else None
    else:
        path = os.path.join(cwd or ".", program[0])
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            return source.read()
    except (OSError, TypeError):
        return ""


def _interpreter_for(env: dict):
    key = tuple(
        sorted((k, v) for k, v in env.items() if READ_AT_IMPORT.match(k) and k not in READ_LATER)
    )
    with _interpreters_lock:
        if key not in _interpreters:
            if len(_interpreters) >= MAX_INTERPRETERS:
                return None
            _interpreters[key] = _Interpreter(env)
        return _interpreters[key]


def install() -> None:
    """Hooks `subprocess.Popen` in this process (a test worker); see the module's
    docstring."""
    if _real or os.environ.get(OFF) == "1" or not hasattr(os, "pidfd_open"):
        return
    popen = subprocess.Popen
    _real.update(
        execute_child=popen._execute_child,
        internal_poll=popen._internal_poll,
        wait=popen._wait,
    )

    names = list(inspect.signature(popen._execute_child).parameters)[1:]

    def _execute_child(self, *args):
        popen_args = dict(zip(names, args))
        request = _request(popen_args)
        started = None
        if request is not None:
            interpreter = _interpreter_for(request["env"])
            if interpreter is not None:
                stdio = (
                    0 if popen_args["p2cread"] == -1 else popen_args["p2cread"],
                    1 if popen_args["c2pwrite"] == -1 else popen_args["c2pwrite"],
                    2 if popen_args["errwrite"] == -1 else popen_args["errwrite"],
                )
                started = interpreter.start(request, stdio)
        if started is None:
            return _real["execute_child"](self, *args)
        # The channel kept as a bare descriptor: a socket object in a reference cycle
        # with this Popen would be closed by its finalizer when the cycle is collected,
        # while Popen.__del__ keeps a running child's Popen for subprocess._cleanup()
        # to poll.
        self.pid, self._prewarmed_status = started[0], started[1].detach()
        self._child_created = True
        pipes = ("p2cread", "p2cwrite", "c2pread", "c2pwrite", "errread", "errwrite")
        self._close_pipe_fds(*(popen_args[name] for name in pipes))

    def _status(self, timeout):
        """The child's wait status from its parent, or None if not yet in `timeout`."""
        channel = socket.socket(fileno=self._prewarmed_status)
        try:
            channel.settimeout(timeout)
            data = channel.recv(STATUS.size, socket.MSG_WAITALL)
        except (TimeoutError, BlockingIOError):
            channel.detach()
            return None
        channel.close()
        if len(data) != STATUS.size:  # The prewarmed interpreter died: as if killed.
            return int(signal.SIGKILL)
        return STATUS.unpack(data)[0]

    def _internal_poll(self, *args, **kwargs):
        if getattr(self, "_prewarmed_status", None) is None:
            return _real["internal_poll"](self, *args, **kwargs)
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    status = _status(self, 0)
                    if status is not None:
                        self._handle_exitstatus(status)
            finally:
                self._waitpid_lock.release()
        return self.returncode

    def _wait(self, timeout):
        if getattr(self, "_prewarmed_status", None) is None:
            return _real["wait"](self, timeout)
        with self._waitpid_lock:
            if self.returncode is None:
                status = _status(self, timeout)
                if status is None:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                self._handle_exitstatus(status)
        return self.returncode

    popen._execute_child = _execute_child
    popen._internal_poll = _internal_poll
    popen._wait = _wait


if __name__ == "__main__":
    _main()
