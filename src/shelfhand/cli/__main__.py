from shelfhand.cli.main import main

main()
