from agentload.cli import main

main()
