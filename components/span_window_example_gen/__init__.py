"""SpanWindowCsvExampleGen: one ExampleGen run that reads the newest K spans."""
