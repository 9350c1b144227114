"""Import every module of the named packages in this process; print the ones that raised."""

import importlib
import json
import pkgutil
import sys
import time
import warnings

warnings.simplefilter("ignore")
failed = {}
t0 = time.time()
n = 0
for pkg_name in sys.argv[1:]:
    try:
        pkg = importlib.import_module(pkg_name)
    except BaseException as exc:
        failed[pkg_name] = type(exc).__name__
        continue
    names = [
        m.name for m in pkgutil.walk_packages(pkg.__path__, pkg_name + ".", onerror=lambda n: None)
    ]
    for name in sorted(names):
        if ".test" in name or name.endswith("__main__") or "._internal.test" in name:
            continue
        n += 1
        try:
            importlib.import_module(name)
        except BaseException as exc:
            failed[name] = f"{type(exc).__name__}: {str(exc)[:120]}"
open(__import__("os").environ["SWEEP_OUT"], "w").write(
    json.dumps({"imported": n, "failed": failed, "s": round(time.time() - t0, 1)})
)
