import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    proc = subprocess.run([ruff, "check", "--no-cache", "inferbench", "tests", "benchmarks"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_code_path_unpickles_what_a_user_or_a_cache_supplies():
    """No pickle anywhere a file from a user or a cache is read: torch artifacts are safetensors, NumPy loads
    refuse object arrays (its default), nothing calls pickle itself."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "inferbench"
    for path in root.rglob("*.py"):
        text = path.read_text()
        for pattern in (r"weights_only\s*=\s*False", r"allow_pickle\s*=\s*True", r"\bpickle\.loads?\(",
                        r"\btorch\.load\(", r"\bcloudpickle\b", r"\bdill\b"):
            assert not re.search(pattern, text), f"{path.relative_to(root.parent)}: {pattern}"
