"""Tools that drive the product from outside, as an operator would: the
benchmark (``bench``, with its shapes, workloads, worker process, report
and the peers' runner: ``bench_shapes``, ``bench_workloads``,
``bench_worker``, ``bench_report``, ``bench_stats``, ``peers``), the soak
(``soak``), the controls' stress run (``stress``), and the process stack
they share with the multi-process tests (``stack``). Started by
``manage.py nodeflow_bench``, ``nodeflow_soak`` and ``nodeflow_stress``
(``tools/management/commands``). They may import any product module; no
product module imports them (tests/test_module_graph.py).
"""
