from medallion_assets.cli.main import main

main()
