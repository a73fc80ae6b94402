"""Runs one Python fuzz target (tests/fuzz/targets.py) under atheris, libFuzzer's engine for
Python: coverage-guided over the target's modules, with libFuzzer's own options.

    python -m tests.fuzz.run_python TARGET [CORPUS_DIR ...] [-max_total_time=S] [-runs=N] ...

With no corpus directory the target's seeds (tests/fuzz/corpus/TARGET) are the corpus. A
finding is an exception other than the target's refusals: atheris prints it and writes the
input to crash-<sha1> (-artifact_prefix=...), which becomes a regression input in
tests/fuzz/regressions/TARGET/.
"""

from __future__ import annotations

import importlib
import os
import sys


def main(argv: list[str]) -> None:
    import atheris

    if len(argv) < 2:
        sys.exit(__doc__)
    name = argv[1]
    from tests.fuzz import targets

    if name not in targets.TARGETS:
        sys.exit(f"unknown target {name!r}; one of {', '.join(targets.TARGETS)}")
    # Coverage is that of the modules under test, instrumented as they are first imported.
    with atheris.instrument_imports(include=targets.MODULES[name]):
        for module in targets.MODULES[name]:
            importlib.import_module(module)
    target = targets.TARGETS[name]
    args = [argv[0]] + argv[2:]
    if not any(not a.startswith("-") for a in args[1:]):
        args.append(str(targets.corpus_dir(name)))
    atheris.Setup(args, target)
    atheris.Fuzz()


def in_a_fresh_child() -> None:
    """Runs the fuzzer in a forked child and exits with its status. libFuzzer's -rss_limit_mb
    reads the peak RSS (getrusage), which a process started by vfork (Python's subprocess)
    inherits from its parent: launched from a pytest that once held 21 GB of models, the fuzzer
    called itself out of memory before its first input. A fork starts a fresh count."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            main(sys.argv)  # atheris.Fuzz ends the process itself; returning is a failure
        except SystemExit as stop:
            if isinstance(stop.code, str):
                print(stop.code, file=sys.stderr)
            code = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    in_a_fresh_child()
