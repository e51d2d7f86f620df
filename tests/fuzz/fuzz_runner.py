"""Run fuzz cases in driver subprocesses under memory and time limits, and judge each step
against the command line's contract.

A step ends well when it exits 0 (success), 1 with one clear line (`darknumba: error: ...`,
no traceback) or 2 (usage). Anything else is a finding: exit 3 (an internal error, a bug),
a traceback, an error that is not one line, an exception escaping `run`, a process killed by
a signal (segfault, abort, out of memory beyond the limit), or a step that runs past its
timeout (a hang). "oom" (exit 1 "out of memory") keeps the contract but is counted apart: the
engine should have refused the size before allocating.
"""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "fuzz_driver.py"
MEMORY_LIMIT = 4 << 30          # address space of a driver (RLIMIT_AS)
FILE_LIMIT = 1 << 30            # largest file a driver may write (RLIMIT_FSIZE)
GOOD = ("ok", "error", "usage", "oom")


@dataclass
class Case:
    """One fuzz case: files to write into a fresh folder, then command lines to run there.
    "{FIX}" in an argument stands for the shared fixtures folder."""
    family: str
    note: str                                   # what was generated or changed
    files: dict = field(default_factory=dict)   # relative path -> bytes
    steps: list = field(default_factory=list)   # [[arg, ...], ...]
    fifos: tuple = ()                           # relative paths made into named pipes
    timeout: float = 60.0                       # seconds per step
    xfail: str | None = None                    # a known bug, with where it is to be fixed
    name: str | None = None

    @property
    def id(self) -> str:
        if self.name:
            return self.name
        import hashlib
        h = hashlib.sha1(json.dumps([self.family, self.note, self.steps, sorted(self.fifos)])
                         .encode())
        for k in sorted(self.files):
            h.update(k.encode() + b"\0" + self.files[k])
        return f"{self.family}-{h.hexdigest()[:10]}"

    def write(self, folder: Path, fix: Path | None = None):
        """The case's files (with "{FIX}" in them replaced when `fix` is given), and its named
        pipes when it is about to run."""
        folder.mkdir(parents=True, exist_ok=True)
        for rel, data in self.files.items():
            p = folder / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data.replace(b"{FIX}", os.fsencode(fix)) if fix else data)
        for rel in self.fifos if fix else ():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            os.mkfifo(folder / rel)

    def save(self, folder: Path):
        """As a corpus entry: its files (named pipes are made when it runs) and case.json."""
        self.write(folder)
        meta = {"family": self.family, "note": self.note, "steps": self.steps,
                "fifos": list(self.fifos), "timeout": self.timeout}
        if self.xfail:
            meta["xfail"] = self.xfail
        (folder / "case.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, folder: Path) -> "Case":
        meta = json.loads((folder / "case.json").read_text())
        files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
                 if p.is_file() and p.name != "case.json"}
        return cls(meta["family"], meta["note"], files, meta["steps"], tuple(meta.get("fifos", ())),
                   meta.get("timeout", 60.0), meta.get("xfail"), name=folder.name)


@dataclass
class Outcome:
    case: Case
    verdict: str = "ok"                         # worst step verdict
    steps: list = field(default_factory=list)   # per step: dict(verdict, code, line, seconds)

    @property
    def good(self) -> bool:
        return self.verdict in GOOD

    def summary(self) -> str:
        bad = next((s for s in self.steps if s["verdict"] == self.verdict), {})
        argv = " ".join(self.case.steps[bad.get("step", 0)]) if self.case.steps else ""
        return (f"{self.case.id} [{self.verdict}] {self.case.note}\n    $ darknumba {argv}\n"
                f"    -> {bad.get('line', '')}")


_RANK = {"ok": 0, "usage": 1, "error": 2, "oom": 3, "unclear": 4, "internal": 5,
         "traceback": 6, "escaped": 7, "hang": 8, "crash": 9}


def judge(code, stderr: str) -> tuple[str, str]:
    """(verdict, the line that shows it) for one step's exit status and stderr."""
    lines = [seg for ln in stderr.splitlines() for seg in [ln.split("\r")[-1]] if seg.strip()]
    last = lines[-1] if lines else ""
    if "Traceback (most recent call last)" in stderr:
        shown = next((ln for ln in reversed(lines) if re.match(r"\w+(Error|Exception)", ln)), last)
        return ("escaped" if code == "escaped" else "traceback"), shown
    if not isinstance(code, int):
        return "escaped", f"{code}: {last}"
    if code == 0:
        return "ok", last
    if code == 2:
        return "usage", last
    if code == 3:
        return "internal", last
    if code == 1 and last.startswith("darknumba: error: "):
        if sum(ln.startswith("darknumba: error") for ln in lines) == 1:
            return ("oom" if last.startswith("darknumba: error: out of memory") else "error"), last
    return "unclear", f"exit {code}: {last}"


def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.setsid()


def _env() -> dict:
    import darknumba
    env = dict(os.environ)
    src = str(Path(darknumba.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    env["TQDM_DISABLE"] = "1"
    env.pop("DARKNUMBA_DEBUG", None)
    return env


def _driver(cases: list[Case], work: Path, fix: Path, tag: str):
    """Run `cases` in one driver process: (step records, exit status, faulthandler text)."""
    jobs = []
    for c in cases:
        d = work / "cases" / c.id
        if d.exists():
            shutil.rmtree(d)
        c.write(d, fix)
        steps = [[a.replace("{FIX}", str(fix)) for a in s] for s in c.steps]
        jobs.append({"id": c.id, "dir": str(d), "steps": steps, "timeout": c.timeout})
    base = work / tag
    Path(f"{base}.json").write_text(json.dumps(jobs))
    budget = sum(c.timeout * len(c.steps) for c in cases) + 120
    with open(f"{base}.out", "w") as out:
        p = subprocess.Popen([sys.executable, str(DRIVER), f"{base}.json", f"{base}.jsonl",
                              f"{base}.faults"], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, preexec_fn=_limits, env=_env(), cwd=work)
        try:
            rc = p.wait(budget)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            rc = p.wait()
    results = Path(f"{base}.jsonl")
    records = [json.loads(ln) for ln in results.read_text().splitlines() if ln.strip()] \
        if results.exists() else []
    faults = Path(f"{base}.faults")
    return records, rc, faults.read_text(errors="replace") if faults.exists() else ""


def _steps(records) -> dict:
    """case id -> judged steps, from a driver's records (finished steps only)."""
    out: dict = {}
    for r in records:
        if r["event"] == "end":
            verdict, line = judge(r["code"], r["stderr"])
            out.setdefault(r["id"], []).append(
                {"step": r["step"], "verdict": verdict, "code": r["code"], "line": line,
                 "seconds": r["seconds"], "stderr": r["stderr"]})
    return out


def _death(records, rc: int, faults: str, fallback: str) -> tuple[str, dict]:
    """(case id, judged step) for the step a driver died in: a hang (faulthandler's timeout)
    or a crash (a signal), with the first frames of the thread that was running."""
    started = None
    for r in records:
        started = r if r["event"] == "start" else None
    died = started or (records[-1] if records else {"id": fallback, "step": 0})
    tail = faults[faults.rfind(f"== case {died['id']} step {died['step']}"):]
    verdict = "hang" if "Timeout (" in tail else "crash"
    why = f"killed by signal {-rc}" if rc < 0 else f"exit {rc}"
    first = tail.splitlines()[1] if len(tail.splitlines()) > 1 else ""
    current = tail[tail.find("Current thread"):] if "Current thread" in tail else tail
    stack = [ln.strip() for ln in current.splitlines() if ln.strip().startswith("File ")][:3]
    return died["id"], {"step": died["step"], "verdict": verdict, "code": rc, "seconds": None,
                        "line": f"{why}; {first} {' < '.join(stack)}", "stderr": tail[-6000:]}


def _lane(cases: list[Case], work: Path, fix: Path, lane: int, results: dict, log):
    """Run `cases` in drivers, one after another. When a driver crashes, the case it died in is
    run again alone; if it passes alone, memory damaged by an earlier case of that driver is
    the likely cause, and the earlier cases (latest first, up to 4) are run alone until one
    dies. The rest of the cases go to a fresh driver."""
    todo = list(cases)
    attempt = 0
    while todo:
        attempt += 1
        records, rc, faults = _driver(todo, work, fix, f"lane{lane}-{attempt}")
        results.update(_steps(records))
        if rc == 0:
            break
        died, step = _death(records, rc, faults, todo[0].id)
        ran = [c for c in todo if any(r["id"] == c.id for r in records)] or todo[:1]
        by_id = {c.id: c for c in todo}
        suspects = [by_id[died]] + [c for c in reversed(ran) if c.id != died][:4]
        if step["verdict"] == "hang":         # a hang is the running step's own
            results.setdefault(died, []).append(step)
            suspects = []
        blamed = died if not suspects else None
        for k, c in enumerate(suspects):
            again, rc2, faults2 = _driver([c], work, fix, f"lane{lane}-{attempt}-alone{k}")
            results[c.id] = _steps(again).get(c.id, [])
            if rc2 != 0:
                results[c.id].append(_death(again, rc2, faults2, c.id)[1])
                blamed = c.id
                break
        if blamed is None:
            step["line"] += " (does not happen when the case runs alone: flaky, or memory " \
                            "damaged by an earlier case)"
            results.setdefault(died, []).append(step)
        if log:
            log(f"lane {lane}: died in {died} step {step['step']} ({step['verdict']}); "
                f"{'blamed on ' + blamed if blamed else 'not reproduced alone'}; restarting")
        done = {r["id"] for r in records} | {died}
        todo = [c for c in todo if c.id not in done]


def run_cases(cases: list[Case], work: Path, fix: Path, jobs: int = 2, log=None) -> list[Outcome]:
    """Every case's outcome, running `jobs` drivers side by side."""
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    lanes = [cases[k::jobs] for k in range(jobs)]
    threads = [threading.Thread(target=_lane, args=(lane, work, fix, k, results, log))
               for k, lane in enumerate(lanes) if lane]
    t = time.time()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if log:
        log(f"{len(cases)} cases in {time.time() - t:.0f} s")
    out = []
    for c in cases:
        steps = results.get(c.id, [])
        if len(steps) < len(c.steps) and not any(s["verdict"] in ("hang", "crash") for s in steps):
            steps.append({"step": len(steps), "verdict": "crash", "code": None, "seconds": None,
                          "line": "the driver never reported this step", "stderr": ""})
        verdict = max((s["verdict"] for s in steps), key=_RANK.get, default="ok")
        out.append(Outcome(c, verdict, steps))
    return out


def report(outcomes: list[Outcome]) -> str:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    head = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: _RANK[kv[0]]))
    bad = [o.summary() for o in outcomes if not o.good]
    return f"{len(outcomes)} cases: {head}" + ("".join("\n  " + b for b in bad) if bad else "")
