"""msgspec structs for the JSON raygate reads and writes, decoding only the fields used."""
