"""The ``calibration`` command line's commands, one module per group (``calibration_client.cli``
imports them in the order ``--help`` lists them), and ``base``, what they share."""
