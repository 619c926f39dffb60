"""Topics as Delta tables: names, offsets index, producer, reader, partitioner."""
