"""Past one machine: long renders and the speech server on a Ray cluster (the `cluster` extra).

    chatterbox-studio say -f BOOK.txt -o BOOK.wav -m MODEL --cluster HEAD:6379 --workers 8
    chatterbox-studio serve -m MODEL --cluster HEAD:6379 --replicas 4

Ray (`pip install 'chatterbox-studio[cluster]'`) is imported only inside this package's
functions, so the desktop app and the default install never load it:

- `pool`: `WorkerPool`, a supervised set of Ray actors (`workers.PieceWorker`) that each hold
  one loaded Engine; bounded in-flight work, a lost worker's pieces sent again elsewhere, and
  `ClusterEngine`, the engine's facts and voice calls for the command line's driver.
- `render`: a parsed script rendered through the pool, yielding the same Parts, in the same
  order, with the same seeds and parts-folder keys as `engine_native.script.render` locally.
- `serve`: the OpenAI-compatible app (app.server.api) as a Ray Serve deployment of N replicas.
"""

from __future__ import annotations


class ClusterError(Exception):
    """The cluster cannot be used (Ray missing, no cluster at the address, no worker left):
    reported in one line."""


def require_ray():
    """The `ray` module, or ClusterError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ClusterError("--cluster needs Ray: pip install 'chatterbox-studio[cluster]' (or: pip install "
                           "'ray[serve]')") from None
    return ray


def connect(address: str):
    """Joins the Ray cluster at `address` (HOST:PORT of the head's GCS from a node of the cluster,
    ray://HOST:10001 from outside it, or "local" for a private one-machine Ray); returns `ray`."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    import logging

    kw = {"namespace": "chatterbox-studio", "logging_level": logging.WARNING, "log_to_driver": False}
    try:
        if address == "local":
            ray.init(include_dashboard=False, **kw)
        else:
            ray.init(address=address, **kw)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ClusterError(f"cannot join the Ray cluster at {address}: {str(e).splitlines()[0] if str(e) else e}") \
            from None
    return ray
