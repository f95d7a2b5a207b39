"""Resource-accounting lab: functional-style solutions."""
