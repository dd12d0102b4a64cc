"""Observations of a calibrator: labelled rows stored in binary chunks (uploads and late labels), and
the online calibrators that follow them."""
