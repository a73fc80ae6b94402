"""A real multi-node Ray cluster on 127.0.0.1 for the cluster tests and benchmarks/cluster_render.py:
a head node (no CPUs of its own: it schedules, the workers render) and N worker nodes, each
`ray start --block` in a process group of its own, so that stopping the cluster ends exactly
the processes it started (never `ray stop`, which ends every Ray on the machine).

Everything stays on the loopback address: Ray maps 127.0.0.1 to the machine's routable address
unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (its one-machine mode), which `ray start` refuses
for a worker node; so each node starts through LOOPBACK_NODE, which allows the worker node and
pins the node's address to 127.0.0.1. A driver that joins sets LOOPBACK_ENV too (`env()`)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
LOOPBACK_NODE = (
    "import sys\n"
    "from ray._private import ray_constants, services\n"
    "ray_constants.ENABLE_RAY_CLUSTER = True\n"
    "services.get_node_ip_address = lambda address=None: '127.0.0.1'\n"
    "from ray.scripts.scripts import main\n"
    "sys.argv = ['ray', *sys.argv[1:]]\n"
    "main()\n"
)


class NodeExited(RuntimeError):
    """A node of the cluster exited while it started."""


def env() -> dict:
    """The environment of a process that joins the cluster (set before it imports ray)."""
    return dict(os.environ, **LOOPBACK_ENV)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRayCluster:
    def __init__(self, workers: int = 2, cpus_per_worker: int = 1, object_store_mb: int = 300):
        self.workers, self.cpus = workers, cpus_per_worker
        self.store = object_store_mb * 2**20
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
        self.procs: list[subprocess.Popen] = []
        self.env = env()

    def _start(self, *args: str) -> subprocess.Popen:
        ports = [f"--{name}={free_port()}" for name in ("node-manager-port", "object-manager-port",
                                                         "metrics-export-port", "dashboard-agent-listen-port",
                                                         "dashboard-agent-grpc-port", "runtime-env-agent-port")]
        cmd = [sys.executable, "-c", LOOPBACK_NODE, "start", "--block", "--node-ip-address=127.0.0.1",
               f"--object-store-memory={self.store}", "--disable-usage-stats", *ports, *args]
        log = open(os.path.join(self.temp, f"node{len(self.procs)}.log"), "wb")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.procs.append(p)
        return p

    def start(self, timeout: float = 180.0, attempts: int = 2) -> "LocalRayCluster":
        """Starts the head, then the workers one at a time. A node that exits while the cluster
        starts (a port that free_port() gave out can be taken before the node binds it) starts the
        cluster again on new ports, `attempts` times in all; the error then quotes the failed
        node's log."""
        for attempt in range(attempts):
            self._start("--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=false",
                        f"--dashboard-port={free_port()}", f"--ray-client-server-port={free_port()}",
                        f"--temp-dir={self.temp}")
            try:
                self._wait_nodes(1, timeout)
                for n in range(self.workers):   # one at a time: two raylets starting at once can race for a port
                    self.add_worker()
                    self._wait_nodes(2 + n, timeout)
                return self
            except NodeExited as e:
                self.stop()
                if attempt + 1 == attempts:
                    raise RuntimeError(str(e)) from None
                self.port = free_port()
                self.address = f"127.0.0.1:{self.port}"
                self.temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
            except BaseException:
                self.stop()
                raise
        return self

    def add_worker(self) -> subprocess.Popen:
        return self._start(f"--address={self.address}", f"--num-cpus={self.cpus}")

    def _wait_nodes(self, n: int, timeout: float) -> None:
        probe = ("import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
                 "print(sum(x['Alive'] for x in ray.nodes()))")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, p in enumerate(self.procs):
                if p.poll() is not None:
                    with open(os.path.join(self.temp, f"node{i}.log"), "rb") as f:
                        tail = f.read()[-2000:].decode(errors="replace")
                    raise NodeExited(f"a Ray node exited ({p.returncode}); the end of its log:\n{tail}")
            r = subprocess.run([sys.executable, "-c", probe, self.address], capture_output=True, text=True,
                               env=self.env, timeout=120)
            if r.returncode == 0 and r.stdout.strip().isdigit() and int(r.stdout.strip()) >= n:
                return
            time.sleep(1.0)
        raise RuntimeError(f"the local Ray cluster did not reach {n} nodes in {timeout:.0f} s")

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()
        shutil.rmtree(self.temp, ignore_errors=True)   # the nodes' logs and object spill files

    def __enter__(self) -> "LocalRayCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
