"""The build backend of agentd-client (PEP 517, and PEP 660 for editable installs), kept in the tree so that
`pip install ./clients/python` needs nothing from a package index: pyproject.toml names it with backend-path
and requires nothing, so pip's isolated build environment stays empty and works offline.

The distribution is pure Python, so a wheel is a zip of the package with its .dist-info (METADATA from
pyproject.toml's [project] table, WHEEL, RECORD). The backend writes only into the directories pip hands
it: nothing (no build/, no .egg-info) appears in the source tree. Zip entries carry a fixed time
($SOURCE_DATE_EPOCH when set), so a build is reproducible.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "agentd_client"
TAG = "py3-none-any"


def _project():
    """pyproject.toml's [project] string keys (name, version, description, requires-python, readme, and
    license's text). tomllib where the interpreter has it (3.11+); else a reader of the `key = "value"`
    lines this file uses."""
    path = os.path.join(ROOT, "pyproject.toml")
    try:
        import tomllib
    except ImportError:
        tomllib = None
    if tomllib is not None:
        with open(path, "rb") as f:
            project = tomllib.load(f)["project"]
        lic = project.get("license")
        if isinstance(lic, dict):
            project["license"] = lic.get("text")
        return project
    project = {}
    table = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*\[([^\]]+)\]\s*$", line)
            if m:
                table = m.group(1).strip()
                continue
            if table != "project":
                continue
            m = re.match(r'\s*([A-Za-z0-9_-]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*$', line)
            if m:
                project[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\\\", "\\")
            m = re.match(r'\s*license\s*=\s*\{\s*text\s*=\s*"([^"]*)"\s*\}\s*$', line)
            if m:
                project["license"] = m.group(1)
    return project


def _names():
    p = _project()
    dist = re.sub(r"[-_.]+", "_", p["name"]).lower()
    return p, dist, f"{dist}-{p['version']}"


def _metadata() -> bytes:
    p, _, _ = _names()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    if p.get("license"):
        lines.append(f"License: {p['license']}")
    body = ""
    if p.get("readme"):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, p["readme"]), encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _wheel_info() -> bytes:
    return (f"Wheel-Version: 1.0\nGenerator: agentd-client build_backend\nRoot-Is-Purelib: true\n"
            f"Tag: {TAG}\n").encode("ascii")


def _epoch() -> int:
    """The time stamped on every entry: $SOURCE_DATE_EPOCH, else 1980-01-01 (zip's earliest)."""
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", "0")), 315532800)


def _package_files():
    """(path in the wheel, path on disk) of every file of the package, in a stable order."""
    base = os.path.join(ROOT, PACKAGE)
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            disk = os.path.join(dirpath, name)
            out.append((os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk))
    return out


def _write_wheel(wheel_directory, files):
    """A wheel of files ((name in the wheel, bytes) pairs) plus its dist-info; returns its file name."""
    _, _, stem = _names()
    info = f"{stem}.dist-info"
    files = list(files) + [(f"{info}/METADATA", _metadata()), (f"{info}/WHEEL", _wheel_info())]
    record = io.StringIO()
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        record.write(f"{name},sha256={digest},{len(data)}\n")
    record.write(f"{info}/RECORD,,\n")
    files.append((f"{info}/RECORD", record.getvalue().encode("utf-8")))
    filename = f"{stem}-{TAG}.whl"
    when = time.gmtime(_epoch())[:6]
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            entry = zipfile.ZipInfo(name, when)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, data)
    return filename


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# -- PEP 517
def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _, _, stem = _names()
    info = os.path.join(metadata_directory, f"{stem}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "wb") as f:
        f.write(_metadata())
    with open(os.path.join(info, "WHEEL"), "wb") as f:
        f.write(_wheel_info())
    return f"{stem}.dist-info"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(name, _read(disk)) for name, disk in _package_files()])


def build_sdist(sdist_directory, config_settings=None):
    """agentd_client-VERSION.tar.gz: pyproject.toml, README.md, the backend, the package and PKG-INFO."""
    _, _, stem = _names()
    filename = f"{stem}.tar.gz"
    members = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
               ("README.md", os.path.join(ROOT, "README.md")),
               ("_build/build_backend.py", os.path.abspath(__file__))] + _package_files()
    mtime = _epoch()
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [(n, _read(d)) for n, d in members] + [("PKG-INFO", _metadata())]:
            entry = tarfile.TarInfo(f"{stem}/{name}")
            entry.size = len(data)
            entry.mtime = mtime
            entry.mode = 0o644
            tar.addfile(entry, io.BytesIO(data))
    return filename


# -- PEP 660: an editable install is a wheel whose .pth puts this directory on sys.path
def get_requires_for_build_editable(config_settings=None):
    return []


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _, dist, _ = _names()
    return _write_wheel(wheel_directory, [(f"__editable__.{dist}.pth", (ROOT + "\n").encode("utf-8"))])
