#!/usr/bin/env python3
"""The layering check: every #include "tessera/..." in the library and the tools must point
down (or sideways into the same folder), in the order docs/architecture.md draws.

  folders:  core <- autograd, data, cuda;  core, autograd, data <- nn;  core, cuda/sim <- nccl_sim;
            nn, nccl_sim, cuda's public headers <- parallel <- train <- plan <- tools (and tessera.h);
            nn <- serve <- tools
  core:     the root (tensor, storage, backend interface) <- cpu/ (the CPU backend) and ops/
            (the front end); cpu/ and ops/ never include each other, and nothing outside core
            includes cpu/ (its public knob is core/threads.h)
  cuda:     sim/ <- the root (device.h for kernels; cuda.h, stream_order.h public) <- kernels/
            <- backend/; outside cuda only cuda.h and stream_order.h are included (and
            nccl_sim, the simulated NCCL, includes sim/streams.h)
  parallel: comm/ <- the root (mesh) <- data/, tp/, pipeline/ (not each other) <- engine/
  public:   a detail/ folder belongs to the folder above it; its headers, and those of the
            implementation folders (core/cpu/, cuda/ but cuda.h, nccl_sim/), are internal and
            not installed, so an installed header may not include one

Usage: check_layering.py [ROOT]   prints each include that runs against the order, with its
file and line, and exits 1 when there is one; 0 otherwise.
"""
import os
import re
import sys

# What each folder may include, besides itself.
FOLDERS = {
    "core": set(),
    "autograd": {"core"},
    "data": {"core"},
    "cuda": {"core"},
    "nn": {"core", "autograd", "data"},
    "nccl_sim": {"core", "cuda"},
    "parallel": {"core", "autograd", "data", "nn", "cuda", "nccl_sim"},
    "train": {"core", "autograd", "data", "nn", "cuda", "parallel"},
    "plan": {"core", "data", "nn", "parallel", "train"},
    "serve": {"core", "autograd", "data", "nn"},
}
# Levels of the sub-folders where the order is defined ("." is the folder's own root files).
# A file may include its own sub-folder and any at a lower level; equal levels are siblings.
SUBFOLDERS = {
    "core": {".": 0, "cpu": 1, "ops": 1},
    "cuda": {"sim": 0, ".": 1, "kernels": 2, "backend": 3},
    "parallel": {"comm": 0, ".": 1, "data": 2, "tp": 2, "pipeline": 2, "engine": 3},
}
# What another folder may include of one with internals.
PUBLIC = {
    "cuda": {"cuda/cuda.h", "cuda/stream_order.h"},
}
EXTRA_PUBLIC = {("nccl_sim", "cuda"): {"cuda/sim/streams.h", "cuda/sim/device_api.h"}}
CORE_INTERNAL = "core/cpu/"

INCLUDE = re.compile(r'^\s*#\s*include\s+"tessera/([^"]+)"')


# Folders whose headers are all internal, and the one public header among them.
IMPLEMENTATION = ("core/cpu/", "cuda/", "nccl_sim/")
IMPLEMENTATION_PUBLIC = {"cuda/cuda.h"}
# A folder's one-include API, above every sub-folder of its own folder.
FOLDER_UMBRELLAS = {"parallel/parallel.h"}


def is_internal(rel):
    """Whether tessera/<rel> is an internal header (not installed)."""
    if "detail" in rel.split("/")[:-1]:
        return True
    return rel.startswith(IMPLEMENTATION) and rel not in IMPLEMENTATION_PUBLIC


def place(rel):
    """(folder, sub-folder) of a path below tessera/, e.g. ("core", "ops"); a detail/ folder
    counts as the folder it is in."""
    parts = [p for p in rel.split("/")[:-1] if p != "detail"] + rel.split("/")[-1:]
    if len(parts) == 1:
        return parts[0], "."
    return parts[0], parts[1] if len(parts) > 2 else "."


def violation_across(s_folder, target, t_folder):
    """Why folder s_folder may not include tessera/<target> of another folder, or None."""
    if t_folder not in FOLDERS[s_folder]:
        return f"{s_folder}/ may not include {t_folder}/ (it is above or beside it)"
    if target.startswith(CORE_INTERNAL):
        return "core/cpu/ is the CPU backend's inside; include core/threads.h or core/backend.h"
    allowed = PUBLIC.get(t_folder)
    if allowed is not None:
        extra = EXTRA_PUBLIC.get((s_folder, t_folder), set())
        if target not in allowed and target not in extra:
            return f"outside {t_folder}/ only {', '.join(sorted(allowed | extra))} may be included"
    return None


def violation(src_rel, target):
    """Why including tessera/<target> from tessera/<src_rel> runs against the order, or None.
    src_rel is None for tools/ (on top of everything)."""
    if not os.path.splitext(target)[1]:
        return None
    t_folder, t_sub = place(target)
    if src_rel is None:
        return None
    if src_rel.endswith(".h") and not is_internal(src_rel) and is_internal(target):
        return "an installed header may not include an internal one (detail/, core/cpu/, cuda/, nccl_sim/)"
    s_folder, s_sub = place(src_rel)
    if s_folder not in FOLDERS:  # tessera/tessera.h, the umbrella
        return None
    if src_rel in FOLDER_UMBRELLAS:  # on top of its own folder
        return None if t_folder == s_folder else violation_across(s_folder, target, t_folder)
    if t_folder != s_folder:
        return violation_across(s_folder, target, t_folder)
    levels = SUBFOLDERS.get(s_folder)
    if levels is None or s_sub == t_sub:
        return None
    if s_sub not in levels or t_sub not in levels:
        return f"{s_folder}/{s_sub} or {s_folder}/{t_sub} has no place in the order; add it"
    if levels[t_sub] > levels[s_sub]:
        return f"{s_folder}/{s_sub} is below {s_folder}/{t_sub}"
    if levels[t_sub] == levels[s_sub]:
        return f"{s_folder}/{s_sub} and {s_folder}/{t_sub} are siblings"
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    found = 0
    for top in ("tessera", "tools"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith((".h", ".cpp", ".cu")):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root)
                src_rel = os.path.relpath(path, os.path.join(root, "tessera")) if top == "tessera" else None
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        why = violation(src_rel, m.group(1))
                        if why:
                            print(f"{rel}:{n}: includes tessera/{m.group(1)}: {why}")
                            found += 1
    if found:
        print(f"check_layering: {found} include(s) against the order (docs/architecture.md)")
        return 1
    print("check_layering: every include follows the order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
