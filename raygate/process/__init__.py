"""What every raygate process shares, the server's and the client side's alike: how it logs
(``logs``), what version it is (``version``) and how its command ends on an error
(``exits``). Not part of the contract: nothing here goes over the wire."""
