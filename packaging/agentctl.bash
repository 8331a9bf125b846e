# bash completion for agentctl(1): commands, their options, and conversation
# and tool call ids asked of agentd itself (agentctl -q list / pending).
_agentctl()
{
	local cur prev words cword
	if declare -F _init_completion >/dev/null; then
		_init_completion || return
	else
		cur=${COMP_WORDS[COMP_CWORD]}
		prev=${COMP_WORDS[COMP_CWORD-1]}
		words=("${COMP_WORDS[@]}")
		cword=$COMP_CWORD
	fi
	local global="-s --socket --json -q --quiet --timeout -h --help --version"
	local commands="ping create get list update delete send events watch resolve approve deny extend settle pending tool-call tool-calls summary compact audit kill stop cancel resume runs status metrics shutdown fork backup raw help"
	case $prev in
	-s | --socket | --batch)
		COMPREPLY=($(compgen -f -- "$cur"))
		return
		;;
	--timeout | --after | --before | --limit | --wait | --id | --system | --param | --event-id | --expected-seq | --comment | --result | --expires-in | --deadline | --args-digest | \
	--meta | --unset-meta | --updated-after | --updated-before)
		return
		;;
	esac
	# The command is the first word that is not an option or an option's value.
	local i cmd="" sock=()
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		-s | --socket) sock=(-s "${words[i+1]}"); ((i++)) ;;
		--timeout) ((i++)) ;;
		-*) ;;
		*) cmd=${words[i]}; break ;;
		esac
	done
	if [[ -z $cmd ]]; then
		COMPREPLY=($(compgen -W "$commands $global" -- "$cur"))
		return
	fi
	local opts=""
	case $cmd in
	runs) opts="--limit --before" ;;
	create) opts="--id --model --system --tool --param --meta --on-busy" ;;
	list) opts="--status --limit --after --meta --model --updated-after --updated-before" ;;
	update) opts="--model --system --tool --param --end --meta --unset-meta --on-busy" ;;
	send) opts="--event-id --json-content --expected-seq --batch --on-busy" ;;
	events) opts="--after --before --limit --type --wait" ;;
	watch) opts="--after --runs" ;;
	resolve) opts="--status --result --by --args-digest" ;;
	approve | deny) opts="--comment --by --args-digest" ;;
	extend) opts="--expires-in --deadline --by" ;;
	settle) opts="--result --by" ;;
	tool-calls) opts="--status" ;;
	kill) opts="--signal" ;;
	fork) opts="--id --model --system --tool --param --meta" ;;
	help) COMPREPLY=($(compgen -W "$commands" -- "$cur")); return ;;
	esac
	case $prev in
	--status) COMPREPLY=($(compgen -W "active suspended idle ended pending resolved errored expired cancelled unknown" -- "$cur")); return ;;
	--signal) COMPREPLY=($(compgen -W "KILL TERM" -- "$cur")); return ;;
	--on-busy) COMPREPLY=($(compgen -W "enqueue reject interrupt steer" -- "$cur")); return ;;
	--type) COMPREPLY=($(compgen -W "user_msg assistant_msg tool_call tool_result suspension resolution error turn_cancelled expiry_warning deadline_extended escalation steer tool_unknown tool_retry budget_exceeded" -- "$cur")); return ;;
	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$opts $global" -- "$cur"))
		return
	fi
	case $cmd in
	get | update | delete | send | events | watch | tool-calls | summary | compact | audit | kill | stop | cancel | resume | runs)
		COMPREPLY=($(compgen -W "$(agentctl "${sock[@]}" -q list 2>/dev/null)" -- "$cur")) ;;
	extend)
		# CONV, then one of its pending calls
		if ((i == cword - 1)); then
			COMPREPLY=($(compgen -W "$(agentctl "${sock[@]}" -q list --status suspended 2>/dev/null)" -- "$cur"))
		else
			COMPREPLY=($(compgen -W "$(agentctl "${sock[@]}" -q tool-calls "${words[i+1]}" --status pending 2>/dev/null)" -- "$cur"))
		fi ;;
	fork)
		# CONV first; SEQ after it is the caller's to know
		if ((i == cword - 1)); then
			COMPREPLY=($(compgen -W "$(agentctl "${sock[@]}" -q list 2>/dev/null)" -- "$cur"))
		fi ;;
	backup)
		COMPREPLY=($(compgen -d -- "$cur")) ;;
	resolve | approve | deny | tool-call)
		COMPREPLY=($(compgen -W "$(agentctl "${sock[@]}" -q pending 2>/dev/null)" -- "$cur")) ;;
	settle)
		# CONV, then an unknown call, then the outcome
		local n=0 j
		for ((j = i + 1; j < cword; j++)); do [[ ${words[j]} != -* ]] && n=$((n + 1)); done
		case $n in
		0) COMPREPLY=($(compgen -W "$(agentctl "${sock[@]}" -q list --status suspended 2>/dev/null)" -- "$cur")) ;;
		1) COMPREPLY=($(compgen -W "$(agentctl "${sock[@]}" -q tool-calls "${words[cword - 1]}" --status unknown 2>/dev/null)" -- "$cur")) ;;
		2) COMPREPLY=($(compgen -W "retry done failed" -- "$cur")) ;;
		esac ;;
	esac
}
complete -F _agentctl agentctl
