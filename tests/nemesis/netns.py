"""Network partitions: each broker and controller in a network namespace of its own, joined to
a bridge in the root namespace by a veth pair (iproute2); a link is cut with a blackhole route
in the sender's namespace (its packets to that address are dropped silently), one way or both
ways. Needs root. (Blackhole routes need no kernel module; tc's drop action and the prio qdisc
are modules that small kernels, this machine's included, do not have.)

Addresses (10.77.0.0/24 on the bridge): the root namespace is .1 (the clients), the PostgreSQL
proxy .2, the S3 proxy .3 (each its own address, so a broker can be cut off from one of them
and not from the clients), node i is .(10 + i).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

PREFIX = "sluicenem-"  # namespaces; interfaces: snb0 (bridge), snh<i> / snn<i> (veth ends)
BRIDGE = "snb0"
NET = "10.77.0"
ROOT_IP = f"{NET}.1"
PG_IP = f"{NET}.2"
S3_IP = f"{NET}.3"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@dataclass
class Network:
    nodes: list[str]  # names, e.g. broker-1, controller-2
    ips: dict[str, str] = field(default_factory=dict)
    devs: dict[str, str] = field(default_factory=dict)  # node -> its veth end (in its ns)
    routes: list[tuple[str, str]] = field(default_factory=list)  # (node, address) blackholed

    def ns(self, node: str) -> str:
        return PREFIX + node

    def up(self) -> None:
        self.down()  # what a crashed run may have left
        _ip("link", "add", BRIDGE, "type", "bridge")
        for addr in (ROOT_IP, PG_IP, S3_IP):
            _ip("addr", "add", f"{addr}/24" if addr == ROOT_IP else f"{addr}/32", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for i, node in enumerate(self.nodes, start=1):
            ns, host_end, node_end = self.ns(node), f"snh{i}", f"snn{i}"
            ip = f"{NET}.{10 + i}"
            _ip("netns", "add", ns)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
            _ip("link", "set", node_end, "netns", ns)
            _ip("link", "set", host_end, "master", BRIDGE, "up")
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", node_end)
            _ip("-n", ns, "link", "set", node_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "default", "via", ROOT_IP)
            self.ips[node], self.devs[node] = ip, node_end

    def down(self) -> None:
        listed = _ip("netns", "list", check=False).stdout.split()
        for name in listed:
            if name.startswith(PREFIX):
                _ip("netns", "del", name, check=False)  # its veth pair goes with it
        _ip("link", "del", BRIDGE, check=False)

    def command(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` run in ``node``'s namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.ns(node), *argv]

    # ------------------------------------------------------------------ faults

    def drop(self, node: str, to_ips: list[str]) -> None:
        """Drop every packet ``node`` sends to ``to_ips`` (one way: what the others send still
        arrives, TCP's answers to it do not)."""
        for ip in to_ips:
            if (node, ip) not in self.routes:
                _ip("-n", self.ns(node), "route", "add", "blackhole", f"{ip}/32")
                self.routes.append((node, ip))

    def cut(self, a: str, b: str, both: bool = True) -> None:
        """Nodes ``a`` and ``b`` (names or, for b, an address) cannot reach each other (or
        ``a`` cannot reach ``b`` when not ``both``)."""
        self.drop(a, [self.ips.get(b, b)])
        if both and b in self.ips:
            self.drop(b, [self.ips[a]])

    def heal(self) -> None:
        for node, ip in self.routes:
            _ip("-n", self.ns(node), "route", "del", "blackhole", f"{ip}/32", check=False)
        self.routes.clear()
