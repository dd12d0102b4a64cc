"""Background jobs: long work (fits, comparisons, refits, alarms) recorded in the jobs table and run by
an in-process pool or Procrastinate workers; their inputs, fan-out, tasks and Prometheus series."""
