"""The distribution installs with no package index: pip of this interpreter (Debian's python3-pip) with
--no-index and no pip configuration, isolated build, --no-build-isolation and editable, then imported from
where it went by a fresh interpreter; the build leaves nothing in the source tree; the in-tree backend's
sdist and wheel (docs/python.md, "Install")."""
import importlib.util
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import CLIENT_ROOT

import agentd_client

BACKEND_DIR = CLIENT_ROOT / "_build"


def tree():
    """Every file under clients/python but bytecode caches (what a build must not add to)."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(CLIENT_ROOT):
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".pytest_cache")]
        out.update(os.path.relpath(os.path.join(dirpath, f), CLIENT_ROOT) for f in filenames)
    return out


def offline_env():
    """The environment without pip settings (no find-links, no index, no config file): only what the
    command line says."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
               PYTHONDONTWRITEBYTECODE="1")
    return env


def pip(*args, python=sys.executable):
    if importlib.util.find_spec("pip") is None:
        pytest.fail(f"pip is not installed for {sys.executable}: install Debian's python3-pip (scripts/deps.sh does)")
    cmd = [sys.executable, "-m", "pip", "--python", python, "install", "--no-index", *args]
    r = subprocess.run(cmd, env=offline_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"


def imported(python, path=None, cwd=None):
    """Where a fresh interpreter imports agentd_client from, its version and its distribution's."""
    env = offline_env()
    env.pop("PYTHONPATH", None)
    if path:
        env["PYTHONPATH"] = str(path)
    code = ("import agentd_client, importlib.metadata as m; "
            "print(agentd_client.__file__); print(agentd_client.__version__); print(m.version('agentd-client')); "
            "print(callable(agentd_client.Client.send_and_wait))")
    r = subprocess.run([python, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.mark.parametrize("how", ["isolated", "no-build-isolation", "editable"])
def test_pip_installs_it_offline(tmp_path, how):
    before = tree()
    if how == "editable":
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True,
                       timeout=300)
        python = str(tmp_path / "venv" / "bin" / "python")
        pip("-e", str(CLIENT_ROOT), python=python)
        where, version, dist_version, ok = imported(python, cwd=tmp_path)
        assert where == str(CLIENT_ROOT / "agentd_client" / "__init__.py")
    else:
        target = tmp_path / "site"
        extra = ["--no-build-isolation"] if how == "no-build-isolation" else []
        pip("--target", str(target), *extra, str(CLIENT_ROOT))
        where, version, dist_version, ok = imported(sys.executable, target, cwd=tmp_path)
        assert where == str(target / "agentd_client" / "__init__.py")
        assert sorted(os.listdir(target)) == ["agentd_client", f"agentd_client-{agentd_client.__version__}.dist-info"]
    assert version == dist_version == agentd_client.__version__ and ok == "True"
    assert tree() == before, f"the build left {sorted(tree() - before)} in clients/python"


def backend():
    sys.path.insert(0, str(BACKEND_DIR))
    try:
        import build_backend
        return build_backend
    finally:
        sys.path.remove(str(BACKEND_DIR))


def test_the_backend_builds_a_reproducible_wheel_and_an_sdist(tmp_path):
    b = backend()
    assert b.get_requires_for_build_wheel() == [] and b.get_requires_for_build_editable() == []
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    name = b.build_wheel(str(tmp_path / "a"))
    assert name == f"agentd_client-{agentd_client.__version__}-py3-none-any.whl"
    assert b.build_wheel(str(tmp_path / "b")) == name
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    with zipfile.ZipFile(tmp_path / "a" / name) as z:
        names = z.namelist()
        info = f"agentd_client-{agentd_client.__version__}.dist-info"
        assert {f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD", "agentd_client/__init__.py",
                "agentd_client/_flows.py"} <= set(names)
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
        meta = z.read(f"{info}/METADATA").decode()
        assert "Name: agentd-client\n" in meta and "Requires-Python: >=3.9\n" in meta
        record = z.read(f"{info}/RECORD").decode().splitlines()
        assert len(record) == len(names) and f"{info}/RECORD,," in record
    sdist = b.build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / sdist) as t:
        stem = f"agentd_client-{agentd_client.__version__}"
        members = set(t.getnames())
    assert {f"{stem}/pyproject.toml", f"{stem}/PKG-INFO", f"{stem}/_build/build_backend.py",
            f"{stem}/agentd_client/client.py"} <= members


def test_the_backend_reads_pyproject_without_tomllib(monkeypatch):
    """Python 3.9 and 3.10 have no tomllib: the fallback reader finds the same [project] keys."""
    b = backend()
    with_toml = b._project()
    import builtins
    real_import = builtins.__import__

    def no_tomllib(name, *a, **kw):
        if name == "tomllib":
            raise ImportError(name)
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_tomllib)
    without = b._project()
    for key in ("name", "version", "description", "readme", "requires-python", "license"):
        assert without[key] == with_toml[key], key
