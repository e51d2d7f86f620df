"""Runs fuzz cases through the real command line, in this process, one after another:

    python fuzz_driver.py CASES.json RESULTS.jsonl FAULTS.txt

CASES.json is a list of {"id", "dir", "steps": [[arg, ...], ...], "timeout"}; each step is one
`darknumba` command line, run with `darknumba.cli.run` in the case's folder with its stdout and
stderr captured. RESULTS.jsonl gets a "start" line before each step and a result line after it
(exit status, captured output, seconds), flushed at once, so that the parent knows which step
was running when this process died. A step that runs past its timeout, and a fatal signal
(segfault, abort), make faulthandler write every thread's Python stack to FAULTS.txt; a timeout
then ends the process. The parent (fuzz_runner.py) sets the memory limits and restarts a driver
for the cases left after one that killed it.
"""
import contextlib
import faulthandler
import io
import json
import os
import sys
import time
import traceback


def _stream():
    """A text stream with a binary buffer beneath, as sys.stdout has (`rnn generate` writes
    bytes to it)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace",
                            write_through=True)


def _text(stream) -> str:
    return stream.buffer.getvalue().decode("utf-8", "replace")


def run_step(run, argv):
    out, err = _stream(), _stream()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run(argv)
        except SystemExit as e:                  # the contract says run() returns a status
            code = f"SystemExit({e.code!r})"
        except BaseException:                    # noqa: BLE001 - an escape is a finding
            code = "escaped"
            err.write(traceback.format_exc())
    return code, _text(out), _text(err)


def main(cases_path, results_path, faults_path):
    cases = json.loads(open(cases_path).read())
    results = open(results_path, "a", buffering=1)
    faults = open(faults_path, "a", buffering=1)
    faulthandler.enable(faults, all_threads=True)
    from darknumba.cli import run

    def record(**kw):
        results.write(json.dumps(kw) + "\n")
        results.flush()
    for case in cases:
        for k, argv in enumerate(case["steps"]):
            record(id=case["id"], step=k, event="start")
            os.chdir(case["dir"])
            faults.write(f"== case {case['id']} step {k}\n")
            faulthandler.dump_traceback_later(case["timeout"], exit=True, file=faults)
            t = time.perf_counter()
            code, out, err = run_step(run, argv)
            faulthandler.cancel_dump_traceback_later()
            record(id=case["id"], step=k, event="end", code=code, stdout=out[-2000:],
                   stderr=err[-6000:], seconds=round(time.perf_counter() - t, 3))


if __name__ == "__main__":
    main(*sys.argv[1:4])
