"""CsvExampleGen: a span's CSV files as tf.Examples, every row, names and labels as written."""
