"""Safe promotion: alias moves recorded and reversible, gated on evidence from challenger evaluations;
refit policies and the scheduler that runs them."""
