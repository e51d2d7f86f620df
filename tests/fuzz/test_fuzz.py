"""The fuzz suite: generated and mutated cfgs, weights, images, label and .data files and option
values go through the real command line in driver subprocesses (4 GB of address space, a
timeout per step), and every step must keep the contract: exit 0, 1 with one clear line, or 2;
no internal error, traceback, signal or hang (fuzz_runner.judge).

Profiles (DARKNUMBA_FUZZ):
- unset / "ci": a derandomised set of cases per family (CI_COUNTS, ~160 in all) plus every
  case in corpus/ (crashes found so far), in the default `python -m pytest -q`.
- "long": `DARKNUMBA_FUZZ=long python -m pytest -q -s tests/fuzz -k test_fuzz_long` generates
  fresh random cases for DARKNUMBA_FUZZ_MINUTES (default 15) and prints the outcome counts;
  every case that breaks the contract is saved under DARKNUMBA_FUZZ_SAVE (default
  ./fuzz-found) as a corpus entry (copy it into corpus/ with an `xfail` reason until fixed).
"""
import os
import shutil
import time
from pathlib import Path

import fuzz_cases as fc
import fuzz_fixtures
import fuzz_inputs as fi
import pytest
from fuzz_runner import Case, report, run_cases
from hypothesis import HealthCheck, Phase, given, settings

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]
PROFILE = os.environ.get("DARKNUMBA_FUZZ", "ci")
CORPUS = Path(__file__).parent / "corpus"
CI_COUNTS = {"cfg": 35, "weights": 25, "images": 25, "labels": 25, "options": 30,
             "npz": 8, "rnn": 5, "video": 5, "export": 5}
JOBS = int(os.environ.get("DARKNUMBA_FUZZ_JOBS", "2"))


@pytest.fixture(scope="module")
def fix(tmp_path_factory):
    return fuzz_fixtures.build(tmp_path_factory.mktemp("fuzz-fixtures"))


def strategies(fix: Path) -> dict:
    originals = {n: (fix / f"{n}.weights").read_bytes() for n in ("det", "grey", "region", "cls")}
    photos = [p.read_bytes() for p in sorted((fix / "ds" / "images" / "train").glob("*.jpg"))]
    return {"cfg": fc.cfg_case(), "weights": fc.weights_case(originals),
            "images": fc.images_case(), "labels": fc.labels_case(photos),
            "options": fc.options_case(), "npz": fi.npz_case(), "rnn": fi.rnn_case(),
            "video": fi.video_case(), "export": fi.export_case(originals)}


def generate(strategy, n: int, derandomize: bool) -> list[Case]:
    """n cases drawn by hypothesis (its generate phase only: the cases run later, batched)."""
    cases = []

    @settings(max_examples=n, derandomize=derandomize, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case):
        cases.append(case)
    collect()
    return list({c.id: c for c in cases}.values())


def save_findings(outcomes, folder: Path) -> list[Path]:
    """Cases that broke the contract, and those that ran out of memory (which keep it, but the
    engine should have refused the size first), as corpus entries with an outcome.txt."""
    saved = []
    for o in outcomes:
        if not o.good or o.verdict == "oom":
            o.case.save(folder / o.case.id)
            (folder / o.case.id / "outcome.txt").write_text(
                o.summary() + "\n\n" + "\n".join(s.get("stderr", "") for s in o.steps))
            saved.append(folder / o.case.id)
    return saved


# Contract breaks whose fix belongs to the engine (kernels/, layers/, cfg.py, parser.py,
# weights.py), each a reason and a test on (outcome, the line that shows the break): a run whose
# every break is one of these is an expected failure (xfail) until the fix lands; any other break
# fails the test. Delete an entry once its fix is merged.
KNOWN_ENGINE: list = []


def known_engine(outcome) -> str | None:
    lines = [s["line"] for s in outcome.steps if s["verdict"] == outcome.verdict]
    return next((why for why, test in KNOWN_ENGINE if any(test(outcome, ln) for ln in lines)),
                None)


def check(outcomes, what: str):
    bad = [o for o in outcomes if not o.good]
    text = report(outcomes)
    print(f"\n{what}: {text}")
    save = os.environ.get("DARKNUMBA_FUZZ_SAVE")
    if save:
        save_findings(outcomes, Path(save))
    unknown = [o for o in bad if known_engine(o) is None]
    assert not unknown, f"{what}: {text}"
    if bad:
        pytest.xfail(f"{what}: only known engine bugs: "
                     + "; ".join(sorted({known_engine(o) for o in bad})))


# -- the corpus: every crash found so far, replayed on every run ---------------------------------
corpus_cases = [Case.load(d) for d in sorted(CORPUS.iterdir()) if (d / "case.json").is_file()] \
    if CORPUS.is_dir() else []


@pytest.fixture(scope="module")
def corpus_outcomes(fix, tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz-corpus")
    return {o.case.id: o for o in run_cases(corpus_cases, work, fix, jobs=JOBS, log=print)}


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.id, marks=[pytest.mark.xfail(reason=c.xfail, strict=False)] if c.xfail
                 else []) for c in corpus_cases])
def test_corpus(case, corpus_outcomes):
    o = corpus_outcomes[case.id]
    assert o.good, o.summary()


# -- generated cases -----------------------------------------------------------------------------
@pytest.mark.skipif(PROFILE == "long", reason="the long profile runs test_fuzz_long instead")
@pytest.mark.parametrize("family", sorted(CI_COUNTS))
def test_fuzz(family, fix, tmp_path):
    cases = generate(strategies(fix)[family], CI_COUNTS[family], derandomize=True)
    check(run_cases(cases, tmp_path, fix, jobs=JOBS, log=print), f"fuzz {family}")


@pytest.mark.skipif(PROFILE != "long", reason="set DARKNUMBA_FUZZ=long for the long profile")
def test_fuzz_long(fix, tmp_path):
    minutes = float(os.environ.get("DARKNUMBA_FUZZ_MINUTES", "15"))
    save = Path(os.environ.get("DARKNUMBA_FUZZ_SAVE", "fuzz-found")).resolve()
    per_round = int(os.environ.get("DARKNUMBA_FUZZ_ROUND", "12"))
    end = time.time() + 60 * minutes
    families = strategies(fix)
    outcomes, rounds = [], 0
    while time.time() < end:
        rounds += 1
        for family, strategy in families.items():
            if time.time() >= end:
                break
            cases = generate(strategy, per_round, derandomize=False)
            got = run_cases(cases, tmp_path / f"r{rounds}-{family}", fix, jobs=JOBS)
            shutil.rmtree(tmp_path / f"r{rounds}-{family}", ignore_errors=True)
            outcomes += got
            saved = save_findings(got, save)
            print(f"round {rounds} {family}: {report(got).splitlines()[0]}"
                  + (f"; saved {len(saved)} to {save}" if saved else ""), flush=True)
    by_family = {}
    for o in outcomes:
        by_family.setdefault(o.case.family, []).append(o)
    for family, got in sorted(by_family.items()):
        print(f"{family}: {report(got).splitlines()[0]}")
    check(outcomes, f"long profile, {rounds} rounds")
