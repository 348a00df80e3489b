"""`bertlab.jobs` on submitit's local executor: jobs as processes, at most `workers` at once, each after the jobs it
waits for; a failure named with its log, the jobs waiting for it skipped, the others run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bertlab.jobs import Engine, Job, run_jobs

# Writes "<name> <start> <end>" (monotonic-free: wall clock) into spans/<name>, after sleeping 1 s, and prints a line.
SCRIPT = ("import sys, time, pathlib; a = time.time(); time.sleep(1); print('hello from', sys.argv[1]); "
          "pathlib.Path('spans', sys.argv[1]).write_text(f'{a} {time.time()}'); sys.exit(int(sys.argv[2]))")


def job(tmp: Path, name: str, code: int = 0, after: tuple[str, ...] = ()) -> Job:
    return Job(name, (sys.executable, "-c", SCRIPT, name, str(code)), tmp / "logs" / f"{name}.log", after)


def spans(tmp: Path) -> dict[str, tuple[float, float]]:
    return {p.name: tuple(map(float, p.read_text().split())) for p in (tmp / "spans").iterdir()}


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "spans").mkdir()
    return tmp_path


def test_two_workers_run_two_jobs_at_once_and_a_job_after_its_dependency(tmp: Path) -> None:
    jobs = [job(tmp, "a"), job(tmp, "b"), job(tmp, "c"), job(tmp, "d", after=("a",))]
    finished = []
    failures = run_jobs(jobs, Engine("local", tmp / "submitit", workers=2), tmp, on_done=lambda j: finished.append(j.name))
    assert failures == [] and sorted(finished) == ["a", "b", "c", "d"]
    s = spans(tmp)
    assert s["d"][0] >= s["a"][1]  # d waited for a
    for t in (s[n][0] + 0.5 for n in s):  # half a second into each job: two running, never three
        assert sum(start <= t <= end for start, end in s.values()) <= 2
    assert (tmp / "logs" / "b.log").read_text() == "hello from b\n"


def test_a_failed_job_is_named_with_its_log_and_its_dependants_skip(tmp: Path) -> None:
    jobs = [job(tmp, "bad", code=3), job(tmp, "later", after=("bad",)), job(tmp, "other")]
    failures = run_jobs(jobs, Engine("local", tmp / "submitit", workers=1), tmp)
    assert [str(f) for f in failures] == [
        f"bad: exit status 3 (its log: {tmp / 'logs' / 'bad.log'})",
        f"later: not run: a job it waits for failed (its log: {tmp / 'logs' / 'later.log'})"]
    assert sorted(spans(tmp)) == ["bad", "other"]


def test_follow_copies_a_jobs_output_here(tmp: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert run_jobs([job(tmp, "shown")], Engine("local", tmp / "submitit"), tmp, follow=True) == []
    assert "hello from shown\n" in capfd.readouterr().out


def test_a_job_waiting_for_a_job_not_given_is_refused(tmp: Path) -> None:
    with pytest.raises(ValueError, match=r"jobs wait for jobs not given: \['gone'\]"):
        run_jobs([job(tmp, "a", after=("gone",))], Engine("local", tmp / "submitit"), tmp)


def test_a_local_jobs_files_are_in_a_folder_of_its_own_made_before_it_starts(tmp: Path) -> None:
    """Not submitit's "%j" folder, made after the job's process starts (which then may not find it): one named after
    the job, there before the submission, and the job's submitit log in it."""
    engine, one = Engine("local", tmp / "submitit"), job(tmp, "one")
    assert engine.executor(one, 0).folder == (tmp / "submitit" / "one").absolute()
    assert (tmp / "submitit" / "one").is_dir()
    assert run_jobs([one], engine, tmp) == []
    assert [p.parent.name for p in (tmp / "submitit").glob("*/*_log.out")] == ["one"]
