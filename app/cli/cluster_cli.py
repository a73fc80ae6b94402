"""The command line's cluster flags (`say --cluster`, `serve --cluster`) and opening a worker pool.

Ray is imported by app.cluster only when `--cluster` is given."""

from __future__ import annotations

import statistics

from app.cli.common import UserError, log, marks_speech


def add_cluster_arguments(p, *, serve: bool = False) -> None:
    g = p.add_argument_group("cluster (the 'cluster' extra: Ray)")
    g.add_argument("--cluster", metavar="ADDRESS",
                   help="run on the Ray cluster at ADDRESS (HEAD:6379 from a node of the cluster, "
                   "ray://HEAD:10001 from outside it, 'local' for Ray on this machine alone)")
    if serve:
        return  # serve's --replicas: with --cluster, servers on the cluster
    g.add_argument("--workers", type=int, default=None, metavar="N",
                   help="with --cluster: N workers, each holding a loaded engine (default: the cluster's CPUs / "
                   "--threads)")
    g.add_argument("--ship-model", action="store_true",
                   help="with --cluster: send the model file to the workers through the cluster (each node keeps a "
                   "copy) instead of reading -m's path on each node")


def open_pool(args):
    """A WorkerPool for `args` (its first worker ready), or UserError."""
    from app.cluster import ClusterError, connect
    from app.cluster.pool import WorkerPool

    if getattr(args, "decoder", None):
        raise UserError("--decoder is not offered with --cluster (the cluster's workers load the model alone)")
    threads = args.threads or 1
    device = getattr(args, "device", "auto")
    device = "cpu" if device == "auto" else device
    try:
        ray = connect(args.cluster)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        workers = args.workers or max(1, cpus // threads)
        if workers < 1:
            raise UserError(f"--workers must be at least 1; got {workers}")
        log(f"cluster   {args.cluster}: {len(ray.nodes())} nodes, {cpus} CPUs; starting {workers} workers of "
            f"{threads} threads on {device}")
        pool = WorkerPool.open(ray, args.model, workers=workers, threads=threads, device=device,
                               ship_model=args.ship_model, watermark=marks_speech(args), note=log)
    except ClusterError as e:
        raise UserError(str(e)) from None
    e = pool.engine
    log(f"model     {args.model} ({e.variant} {e.info['quantization']}, on {e.device} on the cluster's workers)"
        + ("" if e.watermark else "; not watermarking (--no-watermark)"))
    return pool


def pool_summary(pool) -> str:
    s = pool.stats

    def ms(values) -> str:
        return f"{1000 * statistics.median(values):.0f} ms" if values else "n/a"

    return (f"{s.pieces} pieces on {pool.workers} workers, {s.retried} sent again after a lost worker "
            f"({s.replaced} workers replaced); median dispatch {ms(s.dispatch_s)}, return {ms(s.return_s)}, "
            f"piece {ms(s.compute_s)}")
