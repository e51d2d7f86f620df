"""Two hosts on one machine: two network namespaces joined by a veth pair, one MPI rank in
each, MPICH's traffic over that link alone (each namespace has its own loopback; the ranks are
two hydra proxies, two nodes, so no shared memory between them). Hydra starts the proxy of each
"host" through a stand-in for ssh that enters the host's namespace (`ip netns exec`). The
weights equal the one-process run's, and the link carried at least the gradients' bytes.
Needs root (CAP_NET_ADMIN) and iproute2's `ip`; skipped otherwise, saying why."""
import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest
from test_mpi import ITERS, MPIRUN, SRC, assert_same_weights, one_process, shapes  # noqa: F401

pytestmark = pytest.mark.slow

SKIP = "the two-host MPI test needs network namespaces"
IFACE = "dnv"                   # the veth end's name in both namespaces
NET = "10.233.7"


def _ip(*args, check=True):
    return subprocess.run(["ip", *map(str, args)], capture_output=True, text=True, check=check)


def why_not() -> str | None:
    if os.geteuid() != 0:
        return f"{SKIP}: not root (creating them needs CAP_NET_ADMIN)"
    if shutil.which("ip") is None:
        return f"{SKIP}: no `ip` command (Debian: apt-get install iproute2)"
    probe = f"dnprobe{uuid.uuid4().hex[:6]}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode:
        return f"{SKIP}: `ip netns add` failed here ({r.stderr.strip() or r.returncode})"
    _ip("netns", "del", probe, check=False)
    return None


SSH = """#!/bin/sh
# hydra's ssh launcher calls: ssh [options] HOST COMMAND...; run COMMAND in HOST's namespace
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
case "$host" in
%s
  *) echo "no namespace for host $host" >&2; exit 1;;
esac
exec ip netns exec "$ns" sh -c "$*"
"""


@pytest.fixture
def two_hosts(tmp_path):
    reason = why_not()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:6]
    hosts = {f"{NET}.1": f"dnA{tag}", f"{NET}.2": f"dnB{tag}"}
    try:
        for ns in hosts.values():
            _ip("netns", "add", ns)
        a, b = hosts.values()
        _ip("link", "add", IFACE, "netns", a, "type", "veth", "peer", "name", IFACE, "netns", b)
        for addr, ns in hosts.items():
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", IFACE)
            _ip("-n", ns, "link", "set", IFACE, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        ssh = tmp_path / "ssh-into-netns"
        ssh.write_text(SSH % "\n".join(f"  {h}) ns={ns};;" for h, ns in hosts.items()))
        ssh.chmod(0o755)
        yield hosts, ssh
    finally:
        for ns in hosts.values():
            pids = _ip("netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", ns, check=False)


ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp;ofi_rxm", "FI_TCP_IFACE": IFACE}


def mpirun_over_link(hosts, ssh, *argv, timeout):
    """mpirun started in the first namespace, one rank per namespace, MPICH's tcp over the veth."""
    cmd = ["ip", "netns", "exec", next(iter(hosts.values())), MPIRUN, "-launcher", "ssh",
           "-launcher-exec", ssh, "-iface", IFACE, "-hosts", ",".join(hosts), "-np", "2",
           "-ppn", "1", sys.executable, *argv]
    env = {**os.environ, "PYTHONPATH": SRC, **ENV}
    return subprocess.run(list(map(str, cmd)), env=env, capture_output=True, text=True,
                          timeout=timeout)


PROBE = "from mpi4py import MPI; c = MPI.COMM_WORLD; print('sum', c.allreduce(c.rank + 1))"


def mpi_over_link_or_skip(hosts, ssh):
    """An allreduce of two integers over the link, twice at most, before training over it.

    On one CI host (2026-12-03) MPICH's OFI tcp provider could not enable its endpoint inside
    the namespaces ('ep_enable failed ... Bad file descriptor') and the other rank then waited
    for the whole timeout; it never happened on the machine these tests were written on. A
    failed MPI start in the namespaces is the host's network stack, not darknumba: skip saying
    so, with MPICH's own line. Anything after MPI starts is tested."""
    last = ""
    for _ in range(2):
        try:
            r = mpirun_over_link(hosts, ssh, "-c", PROBE, timeout=60)
        except subprocess.TimeoutExpired as e:
            last = f"no answer in 60 s: {(e.stderr or b'')[-300:]!r}"
            continue
        if r.returncode == 0 and r.stdout.count("sum 3") == 2:
            return
        last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1].strip()[:300]
    pytest.skip(f"{SKIP} in which MPICH's tcp provider starts (it did not here: {last})")


def link_bytes(ns) -> int:
    """Bytes sent by the namespace's end of the veth pair."""
    out = _ip("-n", ns, "-s", "-j", "link", "show", IFACE).stdout
    return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])


def test_one_rank_in_each_of_two_namespaces_trains_what_one_process_trains(
        shapes, two_hosts, tmp_path):
    root, data, sub2, _ = shapes
    hosts, ssh = two_hosts
    a, b = hosts.values()
    one_process(data, sub2, tmp_path / "one")
    mpi_over_link_or_skip(hosts, ssh)
    before = link_bytes(a)
    r = mpirun_over_link(hosts, ssh, "-c", "from darknumba.cli import main; main()",
                         "detector", "train", data, sub2, "--backup", tmp_path / "two",
                         "--no-progress", "--no-chart", timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "data-parallel: 2 ranks (1 on this machine" in out, out
    sent = link_bytes(a) - before
    import darknumba as dn
    from darknumba.train.data_parallel import GRADIENTS
    net = dn.load_network(sub2, tmp_path / "two" / "sub2_final.weights")
    grads = 4 * sum(getattr(l, u).size for l in net.layers for w, u in GRADIENTS
                    if getattr(l, w, None) is not None and getattr(l, u, None) is not None)
    assert sent >= 0.9 * ITERS * grads, (sent, grads, out)
    assert_same_weights(sub2, tmp_path / "one" / "sub2_final.weights",
                        tmp_path / "two" / "sub2_final.weights")
