"""Real MPI programs folded and expanded on real cores: the calibrated execution model.

``python -m bench.mpi`` (``bench/mpi/__main__.py``) runs the kernels of
``examples/mpi`` and fits each one's ``u`` and ``OV``; ``kernels`` names the
programs and MPI libraries, ``launch`` starts one run, ``fit`` turns runs into
the model's parameters.
"""
