"""A request's options checked against the model: the model's defaults filled in, every
value in its range (`engine_native.options`), max_tokens within T3's context, the
Multilingual-only options refused by Turbo and Nano, and the take's seed chosen."""

from __future__ import annotations

from engine_native import options as schema
from engine_native.errors import ParameterError


def check_options(config, max_tokens_upper: int, seed, opts: dict) -> tuple[int, dict]:
    """(the take's seed, the complete options): `opts` over the model's defaults."""
    if not config.mtl:
        # Multilingual options: None (the app's "model default") is fine; a value is refused.
        given = [k for k in schema.MTL if opts.get(k) is not None]
        if given:
            raise ParameterError(f"{' and '.join(given)} apply to Multilingual models only; this model is "
                                 f"{config.variant}")
        opts = {k: v for k, v in opts.items() if k not in schema.MTL}
    defaults = config.defaults
    unknown = set(opts) - set(defaults)
    if unknown:
        raise ParameterError(f"unknown option(s): {', '.join(sorted(map(str, unknown)))}; the options are "
                             f"{', '.join(sorted(defaults))}")
    p = {**defaults, **{k: v for k, v in opts.items() if v is not None}}
    for name in p:
        if name == "max_tokens":
            p[name] = schema.check(name, p[name], upper=max_tokens_upper)
        elif p[name] is not None:
            p[name] = schema.check(name, p[name])
    return schema.take_seed(seed), p
