"""Nothing lost, nothing mislabelled: signals, locks, unreadable records, failed writes,
overlapping report inputs, on fake runners (tests/fakes.py)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferbench import records
from inferbench.base.files import atomic_write_text
from inferbench.run import main as run_main
from inferbench.sweep import main as sweep_main

TESTS = Path(__file__).resolve().parent
GRID = ["--models", "mobilenet_v3_small", "--resolutions", "32", "--frameworks", "fake", "--min-iterations", "3",
        "--warmup", "0", "--warmup-seconds", "0", "--threads", "1", "--device", "cpu"]
LAUNCH = "import sys, fakes; fakes.register(); from inferbench.sweep import main; sys.exit(main(sys.argv[1:]))"
WAIT_S = 300  # every wait is a deadline a loaded runner meets (a sweep interrupted at load 32 took over 30 s to exit)


def _long_sweep(tmp_path: Path, name: str, *extra: str, until: str = "measuring") -> tuple[subprocess.Popen, Path]:
    """A sweep whose single cell measures for two minutes; returns once its worker says ``until``."""
    log = tmp_path / f"{name}.log"
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(TESTS), "TMPDIR": str(tmp_path / "tmp")}
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, *GRID, "--frameworks", "fake-slow", "--duration", "120", "-v", "--output-dir",
         str(tmp_path), "--name", name, "--cache-dir", str(tmp_path / "cache"), *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True)
    deadline = time.monotonic() + WAIT_S
    while until not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert until in log.read_text(), log.read_text()
    return proc, log


def test_a_sigterm_during_a_loadgen_test_leaves_no_loadgen_folder(fakes, tmp_path):
    """The worker's LoadGen folder lives in its job's folder, which the parent removes on every path: a SIGTERM to
    the whole process group while LoadGen runs leaves nothing in TMPDIR."""
    proc, _ = _long_sweep(tmp_path, "serve", "--scenario", "single-stream", until="served parity")
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_are_interruptions_like_ctrl_c(fakes, tmp_path, sig, monkeypatch):
    """The signal's disposition is the test's own: a suite started under nohup hands its processes an ignored SIGHUP,
    which a sweep keeps ignoring (test_an_ignored_sighup_stays_ignored), and this test would wait for nothing."""
    monkeypatch.setattr(sys.modules[__name__], "LAUNCH", "import signal; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
                        + LAUNCH)
    proc, log = _long_sweep(tmp_path, "s")
    try:
        proc.send_signal(sig)
        assert proc.wait(timeout=WAIT_S) == 128 + sig
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    last = log.read_text().strip().splitlines()[-1]
    assert last == f"inferbench.sweep: interrupted by {sig.name}; finish it with --resume (completed cells are kept)"
    assert list((tmp_path / "tmp").iterdir()) == []  # the job's temporary folder is gone
    out = subprocess.run(["pgrep", "-f", str(tmp_path / "tmp")], capture_output=True, text=True).stdout
    assert out.strip() == ""  # and so is the worker


def test_an_ignored_sighup_stays_ignored(fakes, tmp_path):
    """Under nohup (SIGHUP ignored) a logout must not stop a sweep."""
    global LAUNCH
    plain = LAUNCH
    LAUNCH = "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN); " + plain
    try:
        proc, _ = _long_sweep(tmp_path, "nohup")
    finally:
        LAUNCH = plain
    try:
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_full_disk_before_the_plan_leaves_no_sweep_behind(fakes, tmp_path, capsys, monkeypatch):
    from inferbench import sweep

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(sweep, "atomic_write_text", full)
    assert sweep_main([*GRID, "--output-dir", str(tmp_path / "out"), "--name", "s",
                       "--cache-dir", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err.strip().splitlines()  # the plan's own line, then the error: one line, no traceback
    assert [line for line in err if not line.startswith("the plan: ")] == [
        f"inferbench.sweep: error: No space left on device ({tmp_path / 'out' / 's' / 'sweep.json'})"]
    assert list((tmp_path / "out").iterdir()) == []


def test_a_folder_in_use_is_refused_with_one_line(fakes, tmp_path, capsys):
    proc, _ = _long_sweep(tmp_path, "busy")
    try:
        assert sweep_main(["--resume", str(tmp_path / "busy")]) == 2
        err = capsys.readouterr().err
        assert f"is in use by another inferbench process (pid {proc.pid})" in err
        assert len(err.strip().splitlines()) == 1
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _sweep(tmp_path: Path, name: str = "s", batch_sizes: str = "1,2,3") -> Path:
    assert sweep_main([*GRID, "--batch-sizes", batch_sizes, "--duration", "0.02", "--output-dir", str(tmp_path),
                       "--name", name, "--cache-dir", str(tmp_path / "cache")]) == 0
    return tmp_path / name


def test_an_unreadable_record_is_named_set_aside_and_rerun(fakes, tmp_path, capsys):
    sweep_dir = _sweep(tmp_path)
    broken = sweep_dir / "mobilenet_v3_small_32_bs2_fake.json"
    broken.write_text(broken.read_text()[:200])  # truncated, as by a full disk or a crash elsewhere
    capsys.readouterr()
    assert len(records.load(sweep_dir)) == 2
    err = capsys.readouterr().err
    assert f"inferbench: skipped {broken}: not readable JSON" in err
    assert sweep_main(["--resume", str(sweep_dir)]) == 0
    err = capsys.readouterr().err
    assert "mobilenet_v3_small_32_bs2_fake.json could not be read" in err and "its cell runs again" in err
    (aside,) = sweep_dir.glob("mobilenet_v3_small_32_bs2_fake.json.unreadable-*")  # kept, never deleted
    assert len(aside.read_text()) == 200
    df = records.load(sweep_dir)
    assert sorted(df["batch_size"]) == [1, 2, 3] and (df["status"] == "ok").all()


def test_a_failed_write_fails_that_cell_only(fakes, tmp_path, capsys, monkeypatch):
    real = atomic_write_text

    def full_disk(path, text):
        if Path(path).name == "mobilenet_v3_small_32_bs2_fake.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, text)

    monkeypatch.setattr("inferbench.records.record.atomic_write_text", full_disk)
    code = run_main(["--model", "mobilenet_v3_small", "--resolution", "32", "--framework", "fake", "--batch-size",
                     "1,2,3", "--duration", "0.02", "--min-iterations", "3", "--warmup", "0", "--warmup-seconds", "0",
                     "--threads", "1", "--device", "cpu", "--output-dir", str(tmp_path / "out"), "--cache-dir",
                     str(tmp_path / "cache")])
    assert code == 1
    (run_dir,) = (tmp_path / "out").iterdir()
    assert sorted(p.name for p in run_dir.glob("*_fake.json")) == ["mobilenet_v3_small_32_bs1_fake.json",
                                                                  "mobilenet_v3_small_32_bs3_fake.json"]
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    err = capsys.readouterr().err
    assert "not written: mobilenet_v3_small@32 fake bs2: No space left on device" in err


def test_report_inputs_that_overlap_count_once(fakes, tmp_path):
    from inferbench.analysis import frames as analysis

    sweep_dir = _sweep(tmp_path, batch_sizes="1")
    assert len(analysis.load([tmp_path, sweep_dir, sweep_dir / "mobilenet_v3_small_32_bs1_fake.json"])) == 1


def test_sweeps_never_share_a_folder(fakes, tmp_path, capsys, monkeypatch):
    from inferbench import sweep

    _sweep(tmp_path, "named", batch_sizes="1")
    assert sweep_main([*GRID, "--output-dir", str(tmp_path), "--name", "named"]) == 2
    assert "named already holds a sweep; use --resume" in capsys.readouterr().err
    monkeypatch.setattr(sweep.time, "strftime", lambda fmt, *a: "sweep-20260101-000000")
    for _ in range(2):
        assert sweep_main([*GRID, "--batch-sizes", "1", "--duration", "0.02", "--output-dir", str(tmp_path / "d"),
                           "--cache-dir", str(tmp_path / "cache")]) == 0
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["sweep-20260101-000000", "sweep-20260101-000000-2"]


def test_a_record_of_a_newer_schema_is_named_set_aside_and_never_mixed_in(fakes, tmp_path, capsys):
    """sweep --resume took a record of an unknown, newer schema as done and wrote it into summary.csv (report then
    refused the whole sweep): it is named, set aside and its cell measured again."""
    import json

    sweep_dir = _sweep(tmp_path)
    future = sweep_dir / "mobilenet_v3_small_32_bs2_fake.json"
    data = json.loads(future.read_text())
    future.write_text(json.dumps({**data, "schema_version": 99}))
    capsys.readouterr()
    assert sweep_main(["--resume", str(sweep_dir)]) == 0
    err = capsys.readouterr().err
    assert "schema version 99 is not one this inferbench reads" in err and "a newer inferbench wrote it" in err
    (aside,) = sweep_dir.glob("mobilenet_v3_small_32_bs2_fake.json.unreadable-*")
    assert json.loads(aside.read_text())["schema_version"] == 99  # kept, never deleted
    df = records.load(sweep_dir)
    from inferbench import SCHEMA_VERSION

    assert sorted(df["batch_size"]) == [1, 2, 3] and (df["schema_version"] == SCHEMA_VERSION).all()


def test_no_lock_is_left_in_a_finished_run_and_a_full_disk_leaves_no_run_folder(fakes, tmp_path, capsys, monkeypatch):
    """A finished run's folder holds its results only (the .lock goes when the folder is let go); a disk too full
    for the lock's few bytes left the run folder behind with a 0-byte .lock: it goes, one line, exit 1."""
    argv = ["--model", "mobilenet_v3_small", "--resolution", "32", "--framework", "fake", "--duration", "0.02",
            "--min-iterations", "3", "--warmup", "0", "--warmup-seconds", "0", "--threads", "1", "--device", "cpu",
            "--cache-dir", str(tmp_path / "cache")]
    assert run_main([*argv, "--output-dir", str(tmp_path / "ok")]) == 0
    (folder,) = (tmp_path / "ok").iterdir()
    assert not (folder / ".lock").exists() and list(folder.glob("*_fake.json"))

    from inferbench.execution import folders

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(folders.os, "pwrite", full)
    assert run_main([*argv, "--output-dir", str(tmp_path / "full")]) == 1
    monkeypatch.undo()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("No space left on device") and "Traceback" not in "\n".join(err)
    assert not (tmp_path / "full").exists()  # the output folder it made for the run too


def test_a_cache_other_users_own_or_can_write_to_is_refused_unless_trusted(fakes, tmp_path, capsys, monkeypatch):
    """An artifact is loaded and run as the user: a cache folder (or a model folder in it) that another user owns
    or can write to could hold their code with its manifest's hashes rewritten. Refused in one line, exit 2,
    nothing written, unless --trust-cache (a cache shared on purpose)."""
    from inferbench.exporters import cache as artifact_cache

    cache = tmp_path / "cache"
    model_folder = cache / "mobilenet_v3_small_32_0123456789abcdef"
    model_folder.mkdir(parents=True)
    argv = ["--model", "mobilenet_v3_small", "--resolution", "32", "--framework", "fake", "--duration", "0.02",
            "--min-iterations", "3", "--warmup", "0", "--warmup-seconds", "0", "--threads", "1", "--device", "cpu",
            "--cache-dir", str(cache)]
    assert artifact_cache.untrusted(cache) is None  # made by this user with the default umask
    model_folder.chmod(0o777)
    for command, args in ((run_main, [*argv, "--output-dir", str(tmp_path / "out")]),
                          (sweep_main, [*GRID, "--cache-dir", str(cache), "--output-dir", str(tmp_path / "out")])):
        assert command(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{model_folder} is writable by every user (mode 777)" in err[0], err
        assert "--trust-cache" in err[0]
        assert not (tmp_path / "out").exists()
    assert run_main([*argv, "--output-dir", str(tmp_path / "out"), "--trust-cache"]) == 0
    model_folder.chmod(0o755)
    cache.chmod(0o730)
    real_gid = os.getegid()
    monkeypatch.setattr(os, "getegid", lambda: real_gid + 1)  # the folder's group is not the user's own
    assert artifact_cache.untrusted(cache) == f"{cache} is writable by group {real_gid} (mode 730)"
    cache.chmod(0o700)
    assert artifact_cache.untrusted(cache) is None
    real_uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real_uid + 1)  # the folders belong to someone else
    assert artifact_cache.untrusted(cache) == (f"{cache} belongs to another user (uid {real_uid}; "
                                               f"you are {real_uid + 1})")
