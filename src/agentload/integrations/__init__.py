"""Optional integrations (MLflow); each imports its library only when used."""
