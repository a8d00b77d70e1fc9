"""A Python sandbox: the code runs in a fresh interpreter (a subprocess in its own session) in a temporary
directory that is deleted afterwards, with limits set by `resource.setrlimit` before the code runs: CPU seconds,
address space (memory), size of files written, no child processes. The wall-clock limit kills the whole process
group. The environment is emptied, and sockets and new processes are refused
inside the interpreter (best effort: this blocks ordinary network use and accidents, it is not a security
boundary against hostile code: the process runs as the trainer's user and can read what that user can; run
untrusted models in a container).

config: `timeout` (s, default 5), `memory_mb` (default 256), `max_output_chars` (default 2000).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

from engine.tools.base import Tool, ToolResult

# Runs before the user's code, in the sandbox's own interpreter: the limits first (set in the child itself, so
# the parent, which runs tools in threads, never needs a preexec_fn), then no sockets and no new processes.
_PRELUDE = """\
import resource as _r
for _k, _v in (("RLIMIT_CPU", {cpu_s}), ("RLIMIT_AS", {memory_bytes}), ("RLIMIT_FSIZE", {file_bytes}),
               ("RLIMIT_CORE", 0), ("RLIMIT_NPROC", 0)):
    try:
        _r.setrlimit(getattr(_r, _k), (_v, _v))
    except (ValueError, OSError):
        if _k != "RLIMIT_NPROC":  # NPROC cannot be lowered for root; the process guard below still applies
            raise
import os as _o, socket as _s, subprocess as _p
def _no_network(*a, **k):
    raise OSError("network access is disabled in the sandbox")
def _no_process(*a, **k):
    raise OSError("starting processes is disabled in the sandbox")
_s.socket = _no_network; _s.create_connection = _no_network; _s.socketpair = _no_network
_p.Popen = _o.fork = _o.system = _o.posix_spawn = _o.posix_spawnp = _o.execv = _o.execve = _no_process
del _r, _k, _v, _o, _s, _p, _no_network, _no_process
"""

def run_python(code: str, timeout: float = 5.0, memory_mb: int = 256, max_output_chars: int = 2000,
               file_bytes: int = 1 << 20) -> ToolResult:
    with tempfile.TemporaryDirectory(prefix="rlstudio-sandbox-") as workdir:
        script = os.path.join(workdir, "main.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(_PRELUDE.format(cpu_s=max(1, int(timeout) + 1), memory_bytes=memory_mb << 20,
                                    file_bytes=file_bytes) + code)

        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "PYTHONIOENCODING": "utf-8",
               "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen([sys.executable, "-I", script], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return ToolResult(f"error: timed out after {timeout:g} s", error=f"timed out after {timeout:g} s")
    text = out.decode("utf-8", errors="replace")
    if len(text) > max_output_chars:
        text = text[:max_output_chars] + "...(truncated)"
    if proc.returncode != 0:
        if proc.returncode < 0:
            reason = f"killed by signal {signal.Signals(-proc.returncode).name} (time or memory limit)"
        else:
            last = text.strip().splitlines()[-1] if text.strip() else f"exit status {proc.returncode}"
            reason = "MemoryError (memory limit)" if "MemoryError" in text else last
        return ToolResult(text or f"error: {reason}", error=reason)
    return ToolResult(text)

class PythonSandboxTool(Tool):
    def __init__(self, config=None, tool_schema=None):
        super().__init__(config, tool_schema)
        self.code_timeout = float(self.config.get("timeout", 5))
        self.timeout = self.code_timeout + 5  # run_tool's own limit: the sandbox kills its process first

    def execute(self, arguments):
        code = arguments.get(self.main_parameter, next(iter(arguments.values()), ""))
        return run_python(str(code), timeout=self.code_timeout, memory_mb=int(self.config.get("memory_mb", 256)),
                          max_output_chars=int(self.config.get("max_output_chars", 2000)))
