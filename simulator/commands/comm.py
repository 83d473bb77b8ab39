"""`rlsim comm`: the cost of one collective on a device group of a topology (idle network)."""
from __future__ import annotations

import argparse

from ..errors import RlsimError

HELP = "cost of a collective (all_reduce, all_gather, ...) on a device group of a topology"
EXAMPLES = """examples:
  rlsim comm --topology dgx-h100 --op all_reduce --bytes 1GiB --group node:0
  rlsim comm --topology dgx-h100 --set topology.nodes=2 --op p2p --bytes 1048576 --group 0,8 --json
  rlsim comm --topology cloudmatrix384 --op all_to_all --bytes 256MiB --group nodes:0-3 --algorithm direct

group SPEC: all | node:I | nodes:I-J | domain:I | devices:I-J | a comma list of device indices.
--bytes follows nccl-tests: the full buffer (all_reduce: the tensor; all_gather/reduce_scatter: the
gathered size; all_to_all: one rank's send buffer; p2p: bytes from the first to the second device).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..network.ops import ALGORITHMS, OPS
    from .common import add_common

    parser.add_argument("--topology", required=True, help="preset name or YAML file")
    parser.add_argument("--op", required=True, choices=OPS, help="the collective")
    parser.add_argument("--bytes", required=True, dest="nbytes", metavar="SIZE", help="e.g. 1GiB, 256MB, 1048576")
    parser.add_argument("--group", required=True, metavar="SPEC", help="devices taking part (see below)")
    parser.add_argument("--algorithm", choices=ALGORITHMS, default=None,
                        help="force an algorithm (default: the fastest for the group)")
    add_common(parser)


# What a collective's cost reads of a device (network/collectives.py): its kernel launch and the
# link rates a topology section without `bw` takes from it; `name` / `base` pick the device. Its
# compute, memory, power and price are not read here.
_DEVICE_FIELDS_READ = frozenset({"name", "base", "launch_overhead_s", "scaleup_bw_Bps", "host_link_bw_Bps"})
_LIMITS_READ = frozenset({"max_devices"})


def _refuse_unread(overrides: list[str]) -> None:
    """A device field or limit the collective's cost does not read was read past: an error naming it."""
    from ..overrides import parse_assignment

    for item in overrides:
        key, value = parse_assignment(item)
        parts = key.split(".")
        if parts[0] == "limits" and len(parts) > 1 and parts[1] not in _LIMITS_READ:
            raise RlsimError("bounds a simulated run; comm reads only limits.max_devices", source="--set", field=key,
                             fix=f"drop --set {key}")
        if "device" not in parts[:-1] and not (parts[-1] == "device" and isinstance(value, dict)):
            continue
        at = parts.index("device")
        given = parts[at + 1:at + 2] or list(value)
        for name in given:
            if name not in _DEVICE_FIELDS_READ:
                field = ".".join(parts[:at + 1] + [name])
                raise RlsimError("not read by a collective's cost, which reads the device's launch_overhead_s "
                                 "and link rates", source="--set", field=field,
                                 fix="drop it (the device's compute, memory and price matter to rlsim run)")


def run(args: argparse.Namespace) -> int:
    from ..hardware.topology import load_topology
    from ..network.collectives import CollectiveModel, parse_group
    from ..overrides import section
    from ..units import parse_bytes
    from .common import print_json

    stray = [s for s in args.overrides if not s.partition("=")[0].strip().startswith(("topology.", "limits."))]
    if stray:
        raise RlsimError(f"comm takes only topology.* and limits.* overrides, got {stray[0]!r}", field="--set",
                         fix="e.g. --set topology.nodes=2")
    _refuse_unread(args.overrides)
    from ..scenario import load_limits
    limits = load_limits(section(args.overrides, "limits"), "--set")
    topology = load_topology(args.topology, section(args.overrides, "topology"), max_devices=limits.max_devices)
    nbytes = parse_bytes(args.nbytes, "--bytes") + 0.0   # + 0.0: -0 is 0
    if nbytes < 0 or nbytes != int(nbytes):   # a buffer holds whole bytes (1e-3 B was priced)
        raise RlsimError(f"must be a whole number of bytes >= 0, got {args.nbytes!r}", field="--bytes",
                         fix="e.g. --bytes 1GiB or --bytes 1048576")
    ranks = parse_group(topology, args.group)
    if args.op == "p2p" and len(ranks) == 2 and ranks[0] == ranks[1]:   # priced as a 0 s local copy
        raise RlsimError("a device appears twice in the group: p2p sends between two devices", field="--group",
                         fix="e.g. --group 0,8")
    try:
        cost = CollectiveModel(topology).cost(args.op, ranks, nbytes, args.algorithm)
    except RlsimError as exc:   # the collective model names its arguments; here they are flags
        if exc.field in ("bytes", "group", "algorithm"):
            raise RlsimError(exc.message, source=exc.source, field=f"--{exc.field}", fix=exc.fix) from None
        raise
    if args.algorithm and cost.algorithm == "local":   # nothing moves: the forced algorithm was read past
        raise RlsimError(f"no algorithm runs here ({'no bytes' if nbytes == 0 else 'one device'}), so "
                         f"--algorithm {args.algorithm} does not apply", field="--algorithm",
                         fix="drop --algorithm, or give a group of several devices and bytes > 0")
    if args.json:
        print_json(cost.to_dict())
        return 0
    print(f"{cost.op} of {_size(cost.bytes)} on {cost.devices} device(s) of {topology.name} "
          f"({topology.shared_level(ranks)} level), algorithm {cost.algorithm}")
    print(f"  time   {cost.time_s * 1e6:12.2f} us")
    print(f"  algbw  {cost.algbw_Bps / 1e9:12.2f} GB/s")
    print(f"  busbw  {cost.busbw_Bps / 1e9:12.2f} GB/s")
    return 0


def _size(nbytes: float) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= factor:
            return f"{nbytes / factor:g} {unit}"
    return f"{nbytes:g} B"
