"""Make ``docs/report.png``, the picture of a report in docs/outputs.md: two replays of a9a
(BOGD and BPA-S at budgets 50 and 200, 3 permutations each, loop runner) overlaid in one report,
the top of the page shot by headless Chromium and reduced to 256 colours.

    python docs/report_screenshot.py [--data-dir DIR]   # DIR holds a9a (default as benchmarks)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("KERNELSTREAM_DATA") or str(HERE.parents[1] / "shared" / "datasets")
    p.add_argument("--data-dir", default=default)
    p.add_argument("--out", default=str(HERE / "report.png"))
    args = p.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("needs headless Chromium (apt-get install chromium)")
    from PIL import Image

    from kernelstream.pipelines.cli import main as cli

    out_png = os.path.abspath(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        # short paths in the page's commands: run from the folder, with a9a linked into it
        os.chdir(tmp)
        os.symlink(os.path.join(os.path.abspath(args.data_dir), "a9a"), "a9a")
        runs = []
        for budget in (50, 200):
            out = f"runs/a9a-B{budget}"
            rc = cli(["replay", "a9a", "-l", "bogd", "-l", "bpa-s",
                      "-p", f"budget={budget}", "-R", "3", "--runner", "loop", "--quiet",
                      "--out", out])
            if rc:
                return rc
            runs.append(out)
        page = f"{tmp}/report.html"
        if cli(["report", *runs, "--out", page]):
            return 1
        shot = f"{tmp}/shot.png"
        subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox",
                        f"--user-data-dir={tmp}/profile", "--hide-scrollbars",
                        "--window-size=1180,1560", f"--screenshot={shot}",
                        Path(page).as_uri()], check=True, capture_output=True, timeout=120)
        Image.open(shot).convert("RGB").quantize(256).save(out_png, optimize=True)
    print(f"{out_png}: {os.path.getsize(out_png):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
