"""A local TVM RPC tracker with GPU servers, started for a test (``python -m tvm.exec.rpc_tracker`` /
``python -m tvm.exec.rpc_server``, as docs/tuning.md tells to start them on real machines)."""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

KEY = "tilus-test"
START_TIMEOUT = 90  # seconds for the tracker to listen and the servers to register (each imports TVM)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*arguments: str) -> subprocess.Popen:
    """A TVM RPC process in its own process group (the server forks a child per session)."""
    return subprocess.Popen([sys.executable, "-m", *arguments, "--silent"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def wait_for(condition, what: str, processes) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                pytest.fail(f"{what}: {process.args[2]} exited with {process.returncode}: "
                            f"{process.stderr.read().decode()[-2000:]}")
        try:
            if condition():
                return
        except (OSError, ConnectionError, RuntimeError, ValueError):
            pass
        time.sleep(0.5)
    pytest.fail(f"{what}: not ready after {START_TIMEOUT} s")


def listening(port: int) -> bool:
    socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return True


@contextlib.contextmanager
def local_tracker(servers: int = 1):
    """``127.0.0.1:<port>:tilus-test`` of a tracker with ``servers`` RPC servers registered under the key;
    every process is stopped on exit."""
    from tvm.s_tir import meta_schedule as ms

    pytest.importorskip("tornado", reason="TVM's RPC tracker needs tornado (the test and tune extras list it)")

    port = free_port()
    processes = [start("tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1))]
    try:
        wait_for(lambda: listening(port), "the tracker", processes)
        for _ in range(servers):
            server_port = free_port()
            processes.append(start("tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(server_port),
                                   "--port-end", str(server_port + 1), "--tracker", f"127.0.0.1:{port}",
                                   "--key", KEY, "--no-fork"))
        config = ms.runner.RPCConfig(tracker_host="127.0.0.1", tracker_port=port, tracker_key=KEY,
                                     session_timeout_sec=60)
        wait_for(lambda: config.count_num_servers(allow_missing=True) == servers, "the servers", processes)
        yield f"127.0.0.1:{port}:{KEY}"
    finally:
        for process in reversed(processes):
            stop(process)
