from lightfed.cli import main

main()
