"""What every raygate process shares, the server's and the client side's alike: how it logs
(``logs``) and what version it is (``version``). Not part of the contract: nothing here
goes over the wire."""
