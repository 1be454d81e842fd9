"""Reading reward logs, writing files and tables atomically, and the temporaries runs leave
(spill folders, staged outputs, interrupts around the rename). Imports only the core."""
