"""The one thing pyproject.toml cannot say: the C extension gptviz.index._block_stats, the neuron index's per-block
statistics in one pass (gptviz/index/block_stats.c). Built at install; where it cannot be (no C compiler) the install
goes on without it and the scan runs the same statistics as torch ops (gptviz/index/native.py). In a checkout:
`python setup.py build_ext --inplace`.

Portable flags only (a wheel runs on other machines of its platform), and no fused multiply-adds: the float32 bin
arithmetic must round as torch's does, for the two paths to give the same histograms bit for bit."""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

FLAGS = {
    "msvc": ["/O2", "/fp:precise"],  # (MSVC contracts only under /fp:fast or /fp:contract)
    "unix": ["-O3", "-ffp-contract=off"],
}


class BuildExt(build_ext):
    def build_extensions(self):
        flags = FLAGS.get(self.compiler.compiler_type, FLAGS["unix"])
        for extension in self.extensions:
            extension.extra_compile_args = flags
        super().build_extensions()


setup(
    ext_modules=[
        Extension(
            "gptviz.index._block_stats",
            sources=["gptviz/index/block_stats_module.c", "gptviz/index/block_stats.c"],
            depends=["gptviz/index/block_stats.h"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
