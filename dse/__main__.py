from dse.cli import console

console()
