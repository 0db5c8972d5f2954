"""Records how the reference prints a typedef's constraint when a value fails it at run time.

Each row of the table (tests/fixtures/constraint-text/cases.tsv) names a base type, a
constraint and a value. For each, this script compiles with the real `inmanta compile`

    typedef t as <base> matching <constraint>
    entity A:
      t v
    end
    implement A using std::none
    x = <value>
    a = A(v=x)

and writes the row back with the message of the error's first cause (`caused by:`), without
the place the reference reports it at. Comment lines and the order of the rows are kept.

Usage: constraint-oracle.py [--venv DIR] [TABLE]
The venv defaults to the one ../shared/tools/reference-setup.sh installs
(~/.cache/inmanta-ref/venv); the table to tests/fixtures/constraint-text/cases.tsv.
"""
import argparse, os, re, shutil, subprocess, tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MODEL = """typedef t as {base} matching {constraint}
entity A:
  t v
end
implement A using std::none
x = {value}
a = A(v=x)
"""
PROJECT = "name: case\nmodulepath: libs\ndownloadpath: libs\nrepo: []\ninstall_mode: release\n"


def record(inmanta, base, constraint, value):
    work = Path(tempfile.mkdtemp())
    try:
        (work / "libs").mkdir()
        (work / "project.yml").write_text(PROJECT)
        (work / "main.cf").write_text(MODEL.format(base=base, constraint=constraint, value=value))
        out = subprocess.run([inmanta, "compile"], cwd=work, capture_output=True, text=True, timeout=600)
        lines = (out.stdout + out.stderr).splitlines()
        for i, line in enumerate(lines):
            if line.strip() == "caused by:" and i + 1 < len(lines):
                return re.sub(r" \(reported in .*\)$", "", lines[i + 1].strip())
        return "NO CAUSE: " + " | ".join(l for l in lines if l.startswith("Error"))
    finally:
        shutil.rmtree(work)


def main():
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=os.path.expanduser("~/.cache/inmanta-ref/venv"))
    parser.add_argument("table", nargs="?", default=here.parent / "tests/fixtures/constraint-text/cases.tsv")
    args = parser.parse_args()
    inmanta = str(Path(args.venv) / "bin" / "inmanta")
    table = Path(args.table)
    lines = table.read_text().splitlines()
    rows = [i for i, l in enumerate(lines) if l and not l.startswith("#")]
    with ThreadPoolExecutor(2) as pool:
        messages = list(pool.map(lambda i: record(inmanta, *lines[i].split("\t")[:3]), rows))
    for i, message in zip(rows, messages):
        lines[i] = "\t".join(lines[i].split("\t")[:3] + [message])
    table.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
