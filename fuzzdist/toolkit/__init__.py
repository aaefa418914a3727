"""What properties build on: bitwise comparisons (:mod:`~fuzzdist.toolkit.checks`), a rank's problems
capped (:mod:`~fuzzdist.toolkit.reporting`), the reference for
reductions (:mod:`~fuzzdist.toolkit.oracle`), ``ReorderingProcessGroup``
(:mod:`~fuzzdist.toolkit.reorder`), reference models' initialisation
(:mod:`~fuzzdist.toolkit.models`), and sharing tensors the way torch does
(:mod:`~fuzzdist.toolkit.sharing`, :mod:`~fuzzdist.toolkit.cuda_ipc`)."""
