"""ValidationGate: stops the run before Transform when the data has anomalies."""
