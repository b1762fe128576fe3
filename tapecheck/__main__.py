from tapecheck.cli import main

main()
