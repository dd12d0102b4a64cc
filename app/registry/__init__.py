"""The registry (as MLflow's model registry): named calibrators, immutable versions and movable aliases;
fitting, serving and reporting them."""
