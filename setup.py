"""Build of the compiled per-round kernels (everything else is in pyproject.toml).

The extension is optional: without a C compiler (or Python's headers) the install still
succeeds and the learners run their numpy reference code (``kernelstream.learners.compiled``
says which one is in use and why).
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent
SOURCE = "kernelstream/learners/_ckernels.c"
FEATURES_SOURCE = "kernelstream/learners/_ck_features.c"
BUDGET_SOURCE = "kernelstream/learners/_ck_budget.c"
MULTI_SOURCE = "kernelstream/learners/_ck_multi.c"
EXPERTS_SOURCE = "kernelstream/learners/_ck_experts.c"
OMKC_SOURCE = "kernelstream/learners/_ck_omkc.c"
LINEAR_SOURCE = "kernelstream/learners/_ck_linear.c"
# the build records its sources' hash (kernelstream.learners.compiled.source_hash), so edited
# sources with an old build are detected and the learners fall back to numpy, saying so
C_FILES = sorted((HERE / "kernelstream" / "learners").glob("_ck*.[ch]"))
SOURCE_HASH = hashlib.sha256(b"".join(p.read_bytes() for p in C_FILES)).hexdigest()[:16]

setup(
    ext_modules=[
        Extension(
            "kernelstream.learners._ckernels",
            sources=[SOURCE],
            depends=[str(p.relative_to(HERE)) for p in C_FILES],
            define_macros=[("KS_SOURCE_HASH", f'"{SOURCE_HASH}"')],
            # IEEE arithmetic as written: no FMA contraction, no reassociation, so results do
            # not depend on the compiler's mood or the machine's vector width
            extra_compile_args=["-O2", "-std=c99", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        ),
        # feature maps and their block driver (compiled.py, "feature maps"); -O3 so the
        # elementwise loops (projection, cos/sin) vectorise, which changes no result (no FMA,
        # no reassociation: each element sees the same IEEE operations at any vector width)
        Extension(
            "kernelstream.learners._ck_features",
            sources=[FEATURES_SOURCE],
            depends=[str(p.relative_to(HERE)) for p in C_FILES],
            define_macros=[("KS_SOURCE_HASH", f'"{SOURCE_HASH}"')],
            extra_compile_args=["-O3", "-std=c99", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        ),
        # budget maintenance and its block driver (compiled.py, "budget rules"); -O3 for the
        # Projectron's K^-1 k, vectorised the same way (each sum keeps its order)
        Extension(
            "kernelstream.learners._ck_budget",
            sources=[BUDGET_SOURCE],
            depends=[str(p.relative_to(HERE)) for p in C_FILES],
            define_macros=[("KS_SOURCE_HASH", f'"{SOURCE_HASH}"')],
            extra_compile_args=["-O3", "-std=c99", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        ),
        # multi-kernel scores from one shared distance row (compiled.py, "multi-kernel scores");
        # -O3 so that the exponential loop vectorises (same rule as _ck_features)
        Extension(
            "kernelstream.learners._ck_multi",
            sources=[MULTI_SOURCE],
            depends=[str(p.relative_to(HERE)) for p in C_FILES],
            define_macros=[("KS_SOURCE_HASH", f'"{SOURCE_HASH}"')],
            extra_compile_args=["-O3", "-std=c99", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        ),
        # whole blocks of the expert-advice selection learners (compiled.py, "expert blocks"):
        # they call numpy's own BLAS routines and exp loop, so -O2 as _ckernels
        Extension(
            "kernelstream.learners._ck_experts",
            sources=[EXPERTS_SOURCE],
            depends=[str(p.relative_to(HERE)) for p in C_FILES],
            define_macros=[("KS_SOURCE_HASH", f'"{SOURCE_HASH}"')],
            extra_compile_args=["-O2", "-std=c99", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        ),
        # bounded OMKC's whole rounds (compiled.py, "bounded OMKC"): includes _ck_budget's
        # rules (_ck_budget_rules.h), so the same flags as _ck_budget
        Extension(
            "kernelstream.learners._ck_omkc",
            sources=[OMKC_SOURCE],
            depends=[str(p.relative_to(HERE)) for p in C_FILES],
            define_macros=[("KS_SOURCE_HASH", f'"{SOURCE_HASH}"')],
            extra_compile_args=["-O3", "-std=c99", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        ),
        # the primal linear Perceptron, PA-I and OGD (learners/_primal.py): sequential sums,
        # so -O2 as _ckernels
        Extension(
            "kernelstream.learners._ck_linear",
            sources=[LINEAR_SOURCE],
            depends=[str(p.relative_to(HERE)) for p in C_FILES],
            define_macros=[("KS_SOURCE_HASH", f'"{SOURCE_HASH}"')],
            extra_compile_args=["-O2", "-std=c99", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        ),
    ]
)
